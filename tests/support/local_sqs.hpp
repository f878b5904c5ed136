#pragma once
// Client settings for the local emulator, and process measurements, shared by the
// integration tests and the benchmarks.
#include <fstream>
#include <string>

#include "sluice/sqs/client.hpp"
#include "support/emulator.hpp"

namespace sluice::test {

inline sqs::SqsClientOptions emulator_client_options() {
  sqs::SqsClientOptions o;
  o.endpoint_url = Emulator::shared().endpoint();
  o.region = "us-east-1";
  // The emulator accepts any signature; these are placeholders, not secrets.
  o.credentials = aws::make_static_credentials({"AKIDLOCAL", "local-secret", "", {}, "test"});
  o.http.use_env_proxy = false;
  return o;
}

// Resident set size of this process, KiB.
inline long rss_kib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return 0;
}

}  // namespace sluice::test
