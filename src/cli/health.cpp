// `sluice health`: one GET of a pipeline's /healthz or /readyz, for container health
// checks.
#include "cli/health.hpp"

#include <iostream>
#include <stdexcept>

#include "common/redact.hpp"
#include "observe/http_get.hpp"

namespace sluice::app {
int probe(const std::string& url) {
  observe::LocalUrl parsed;
  try {
    parsed = observe::parse_local_url(url);
  } catch (const std::invalid_argument& e) {
    std::cerr << "sluice health: --url: " << e.what() << ", expected http://host:port/healthz\n";
    return 2;
  }
  try {
    const auto response = observe::http_request(parsed);
    if (response.status == 200) return 0;
    std::cerr << "sluice health: " << common::redact_password(url) << " answered "
              << response.status << "\n";
  } catch (const std::exception& e) {
    std::cerr << "sluice health: " << common::redact_password(url) << ": " << e.what()
              << " (expected a running pipeline's metrics.listen)\n";
  }
  return 1;
}

}  // namespace sluice::app
