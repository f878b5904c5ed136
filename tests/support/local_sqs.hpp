#pragma once
// Client settings for the local emulator, and process measurements, shared by the
// integration tests and the benchmarks.
#include <sys/resource.h>

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

// The stages of a pipeline over `sluice publish --generate` events (inventory records:
// skuId, locationId, eventType, quantity): normalize and identity sections of a pipeline
// YAML file.
inline std::string inventory_stages_yaml() {
  return "normalize:\n  fields:\n"
         "    - {name: skuId, from: /skuId, required: true}\n"
         "    - {name: locationId, from: /locationId, required: true}\n"
         "    - {name: eventType, from: /eventType, required: true}\n"
         "    - {name: quantity, from: /quantity, type: integer, required: true}\n"
         "    - {name: eventId, from: /eventId}\n"
         "identity:\n  versions:\n    V1: [skuId, locationId, eventType, quantity]\n";
}

// An inventory event of exactly `bytes` bytes (a "pad" field fills it), which the
// stages above store.
// With `two_byte_pad`, the pad is "é" (two bytes in UTF-8, one character in UTF-16).
inline std::string inventory_event_of_size(std::size_t bytes, const std::string& sku,
                                           bool two_byte_pad = false) {
  const std::string head =
      R"({"skuId":")" + sku + R"(","locationId":"L","eventType":"RECEIVED","quantity":3,"pad":")";
  const std::string tail = "\"}";
  const std::size_t pad = bytes - head.size() - tail.size();
  if (!two_byte_pad) return head + std::string(pad, 'p') + tail;
  std::string body = head;
  for (std::size_t i = 0; i < pad / 2; ++i) body += "\xC3\xA9";
  if (pad % 2) body += 'p';
  return body + tail;
}

// CPU time (user + system) of this process so far, seconds.
inline double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
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
