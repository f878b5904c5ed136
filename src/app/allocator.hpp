#pragma once
// Which malloc the process runs on: the binary links jemalloc (a fifth of the
// pipeline's CPU went to glibc's malloc), a program linking the library chooses its own.
#include <string>

namespace sluice::app {

// "jemalloc 5.3.0-...", "tcmalloc 2.10", "AddressSanitizer" or "glibc 2.36".
std::string allocator_in_use();

}  // namespace sluice::app
