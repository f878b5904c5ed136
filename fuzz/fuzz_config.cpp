// libFuzzer target: pipeline configuration files, one pipeline or several (with
// `pipelines:`). Any text must give either configurations or a ConfigError, never a
// crash.
#include <cstdint>
#include <string>

#include "config/config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    sluice::app::parse_pipelines(std::string(reinterpret_cast<const char*>(data), size),
                                 "fuzz.yaml");
  } catch (const sluice::app::ConfigError&) {
  }
  return 0;
}
