#include "app/allocator.hpp"

#include <dlfcn.h>
#include <gnu/libc-version.h>

#include <cstddef>

namespace sluice::app {

std::string allocator_in_use() {
  // Looked up, not linked: the same code tells whichever allocator won the symbols.
  using Mallctl = int (*)(const char*, void*, std::size_t*, void*, std::size_t);
  if (auto mallctl = reinterpret_cast<Mallctl>(dlsym(RTLD_DEFAULT, "mallctl"))) {
    const char* version = nullptr;
    std::size_t size = sizeof(version);
    if (mallctl("version", &version, &size, nullptr, 0) == 0 && version)
      return std::string("jemalloc ") + version;
    return "jemalloc";
  }
  using TcVersion = const char* (*)(int*, int*, const char**);
  if (auto tc_version = reinterpret_cast<TcVersion>(dlsym(RTLD_DEFAULT, "tc_version")))
    return tc_version(nullptr, nullptr, nullptr);
  if (dlsym(RTLD_DEFAULT, "__asan_init")) return "AddressSanitizer";
  return std::string("glibc ") + gnu_get_libc_version();
}

}  // namespace sluice::app
