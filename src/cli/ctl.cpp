#include "cli/ctl.hpp"

#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>

#include "common/redact.hpp"
#include "observe/admin.hpp"
#include "observe/http_get.hpp"

namespace sluice::app {

namespace {

// A member as text, whatever the answer holds (a server that is not sluice's).
std::string text_of(const nlohmann::json& object, const char* key) {
  if (!object.is_object() || !object.contains(key)) return "?";
  const auto& v = object[key];
  return v.is_string() ? v.get<std::string>() : v.dump();
}

void print_state(const nlohmann::json& p) {
  std::cout << text_of(p, "pipeline") << "  " << text_of(p, "state");
  for (const char* figure : {"in_flight", "received", "written", "filtered"})
    if (p.is_object() && p.contains(figure)) std::cout << "  " << figure << "=" << p[figure].dump();
  if (p.is_object() && p.contains("error")) std::cout << "  (" << text_of(p, "error") << ")";
  std::cout << "\n";
}

}  // namespace

int run_ctl(const CtlOptions& o) {
  if (o.action != "status" && o.pipeline.empty()) {
    std::cerr << "sluice ctl " << o.action << ": expected the pipeline's name (sluice ctl status "
              << "lists them)\n";
    return 2;
  }
  if (!o.pipeline.empty() && !is_pipeline_name(o.pipeline)) {
    std::cerr << "sluice ctl " << o.action << ": got pipeline '" << o.pipeline << "', expected "
              << kPipelineNameExpected << " (sluice ctl status lists them)\n";
    return 2;
  }
  std::string base = o.url;
  while (!base.empty() && base.back() == '/') base.pop_back();
  const std::string shown = common::redact_password(base);  // what messages print
  observe::LocalRequest request;
  request.method = o.action == "status" ? "GET" : "POST";
  const std::string path = "/pipelines" + (o.pipeline.empty() ? "" : "/" + o.pipeline) +
                           (o.action == "status" ? "" : "/" + o.action);
  observe::LocalUrl url;
  try {
    url = observe::parse_local_url(base + path);
  } catch (const std::invalid_argument& e) {
    std::cerr << "sluice ctl: --url: " << e.what()
              << ", expected http://host:port (a sluice metrics.listen with admin.enabled)\n";
    return 2;
  }
  if (const char* token = std::getenv("SLUICE_ADMIN_TOKEN"); token && *token) {
    if (const auto problem = admin_token_problem(token); !problem.empty()) {
      std::cerr << "sluice ctl: SLUICE_ADMIN_TOKEN: " << problem << "\n";
      return 2;
    }
    request.headers.emplace_back("Authorization", std::string("Bearer ") + token);
  }
  request.timeout = std::chrono::seconds(10);
  observe::LocalResponse response;
  try {
    response = observe::http_request(url, request);
  } catch (const std::exception& e) {
    std::cerr << "sluice ctl: " << shown << ": " << e.what() << "\n";
    return 1;
  }
  const auto body = nlohmann::json::parse(response.body, nullptr, false);
  const bool is_object = body.is_object();
  const std::string error = is_object && body.contains("error") ? text_of(body, "error") : "";
  switch (response.status) {
    case 200:
      if (!is_object) {
        std::cerr << "sluice ctl: " << shown << path << " answered 200 with something that is "
                  << "not a sluice status (is --url a sluice metrics.listen?)\n";
        return 1;
      }
      if (body.contains("pipelines") && body["pipelines"].is_array()) {
        for (const auto& p : body["pipelines"]) print_state(p);
      } else {
        print_state(body);
      }
      return 0;
    case 401:
      std::cerr << "sluice ctl: " << shown << " refused the token: "
                << (std::getenv("SLUICE_ADMIN_TOKEN") && *std::getenv("SLUICE_ADMIN_TOKEN")
                        ? "SLUICE_ADMIN_TOKEN is not the one the pipeline was started with"
                        : "it needs one: set SLUICE_ADMIN_TOKEN")
                << "\n";
      return 1;
    case 404:
      if (is_object && body.contains("pipelines")) {
        std::cerr << "sluice ctl: " << error << " (pipelines: " << body["pipelines"].dump()
                  << ")\n";
        return 2;
      }
      std::cerr << "sluice ctl: " << shown << " has no admin endpoints (is admin.enabled true?)\n";
      return 1;
    default:
      std::cerr << "sluice ctl: " << shown << path << " answered " << response.status
                << (error.empty() ? "" : ": " + error) << "\n";
      return 1;
  }
}

}  // namespace sluice::app
