// sluice plan reads another process's /metrics: any text, well-formed or not, must
// parse or be refused with std::invalid_argument, and the arithmetic over whatever
// parsed must neither crash nor overflow into UB. Input: two scrapes split at the
// first NUL byte.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "cli/plan.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const auto split = input.find('\0');
  const std::string first = input.substr(0, split);
  const std::string second = split == std::string::npos ? input : input.substr(split + 1);
  try {
    std::vector<sluice::app::Scrape> scrapes{sluice::app::parse_exposition(first, 0),
                                             sluice::app::parse_exposition(second, 1.5)};
    const auto measured = sluice::app::measure(scrapes, 1.0);
    (void)sluice::app::recommend(measured, 10);
  } catch (const std::invalid_argument&) {
  } catch (const std::runtime_error&) {  // no work seen, not a sluice endpoint
  }
  return 0;
}
