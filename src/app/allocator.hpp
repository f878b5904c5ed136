#pragma once
// Which malloc the process runs on: the binary links jemalloc (a fifth of the
// pipeline's CPU went to glibc's malloc), a program linking the library chooses its own.
#include <string>

namespace sluice::app {

// "jemalloc 5.3.0-...", "glibc 2.36", or the file of the library that serves malloc
// ("libtcmalloc_minimal.so.4", "libasan.so.8").
std::string allocator_in_use();

}  // namespace sluice::app
