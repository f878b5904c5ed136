// libFuzzer target: the file source's checkpoint (source.file.checkpoint), a file that a
// crash, a disk or a person may have left in any state. Any input either parses into
// positions or is refused with std::runtime_error naming the file; nothing else escapes.
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>

#include "file/file_source.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  try {
    const auto files = sluice::file::parse_checkpoint(input, "fuzz.checkpoint");
    for (const auto& [path, at] : files)
      if (at.offset < at.line) std::abort();  // a line is at least its newline
  } catch (const std::runtime_error& e) {
    if (std::string_view(e.what()).find("fuzz.checkpoint") == std::string_view::npos) std::abort();
  }
  return 0;
}
