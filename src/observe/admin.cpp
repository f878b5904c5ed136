#include "observe/admin.hpp"

#include <openssl/crypto.h>
#include <spdlog/spdlog.h>

#include <cctype>

namespace sluice::app {

namespace {

void answer(MetricsServer::Exchange& x, int status, nlohmann::json body) {
  x.status = status;
  x.content_type = "application/json";
  x.body = body.dump() + "\n";
}

// Compared in constant time: the answer's timing says nothing about the token. The
// scheme's name is case-insensitive (RFC 9110 11.1).
bool token_matches(std::string_view authorization, const std::string& token) {
  constexpr std::string_view scheme = "bearer ";
  if (authorization.size() < scheme.size()) return false;
  for (std::size_t i = 0; i < scheme.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(authorization[i])) != scheme[i]) return false;
  const auto given = authorization.substr(scheme.size());
  return given.size() == token.size() &&
         CRYPTO_memcmp(given.data(), token.data(), token.size()) == 0;
}

}  // namespace

bool is_pipeline_name(std::string_view name) {
  return !name.empty() && name.size() <= 64 &&
         name.find_first_not_of(
             "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
             "0123456789._-") == std::string_view::npos;
}

std::string admin_token_problem(std::string_view token) {
  for (const char c : token)
    if (c <= ' ' || c == 0x7f)
      return c == '\n' || c == '\r' ? "it holds a line break (a secret read from a file? strip "
                                      "the trailing newline)"
                                    : "it holds a space or a control character (a bearer token "
                                      "is visible ASCII)";
  return {};
}

bool answer_admin(MetricsServer::Exchange& x, const std::vector<PipelineControl*>& pipelines,
                  const std::string& token) {
  const std::string_view path = std::string_view(x.target).substr(0, x.target.find('?'));
  if (path != "/pipelines" && !path.starts_with("/pipelines/")) return false;
  if (!token.empty() && !token_matches(x.authorization, token)) {
    answer(x, 401, {{"error", "expected Authorization: Bearer <SLUICE_ADMIN_TOKEN>"}});
    x.www_authenticate = "Bearer";
    spdlog::warn("event=admin_refused method={} target={} reason={}", x.method, path,
                 x.authorization.empty() ? "no_token" : "wrong_token");
    return true;
  }
  if (path == "/pipelines") {
    if (x.method != "GET") {
      answer(x, 405, {{"error", "GET /pipelines"}});
      return true;
    }
    auto all = nlohmann::json::array();
    for (const auto* p : pipelines) all.push_back(p->status());
    answer(x, 200, {{"pipelines", all}});
    return true;
  }
  std::string_view rest = path.substr(std::string_view("/pipelines/").size());
  const auto slash = rest.find('/');
  const std::string name(rest.substr(0, slash));
  const std::string action(slash == std::string_view::npos ? "" : rest.substr(slash + 1));
  PipelineControl* pipeline = nullptr;
  std::vector<std::string> names;
  for (auto* p : pipelines) {
    names.push_back(p->name());
    if (p->name() == name) pipeline = p;
  }
  if (!pipeline) {
    answer(x, 404, {{"error", "no pipeline named '" + name + "'"}, {"pipelines", names}});
    return true;
  }
  if (action.empty()) {
    if (x.method != "GET") {
      answer(x, 405, {{"error", "GET /pipelines/" + name}});
      return true;
    }
    answer(x, 200, pipeline->status());
    return true;
  }
  if (action != "pause" && action != "resume") {
    answer(x, 404, {{"error", "expected /pipelines/" + name + "/pause or /resume"}});
    return true;
  }
  if (x.method != "POST") {
    answer(x, 405, {{"error", "POST /pipelines/" + name + "/" + action}});
    return true;
  }
  if (action == "pause")
    pipeline->pause();
  else
    pipeline->resume();
  spdlog::info("event=admin_{} pipeline={}", action, name);
  answer(x, 200, pipeline->status());
  return true;
}

}  // namespace sluice::app
