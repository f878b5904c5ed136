#include "app/allocator.hpp"

#include <dlfcn.h>
#include <gnu/libc-version.h>

#include <cstddef>
#include <filesystem>

namespace sluice::app {

std::string allocator_in_use() {
  // The library that won the malloc symbol: the binary links jemalloc, but LD_PRELOAD or
  // a sanitizer can put another in front of it.
  Dl_info info{};
  void* malloc_in_use = dlsym(RTLD_DEFAULT, "malloc");
  if (!malloc_in_use || !dladdr(malloc_in_use, &info) || !info.dli_fname) return "unknown";
  const std::string file = std::filesystem::path(info.dli_fname).filename().string();
  if (file.starts_with("libc.so")) return std::string("glibc ") + gnu_get_libc_version();
  if (file.starts_with("libjemalloc")) {
    using Mallctl = int (*)(const char*, void*, std::size_t*, void*, std::size_t);
    const char* version = nullptr;
    std::size_t size = sizeof(version);
    auto mallctl = reinterpret_cast<Mallctl>(dlsym(RTLD_DEFAULT, "mallctl"));
    if (mallctl && mallctl("version", &version, &size, nullptr, 0) == 0 && version)
      return std::string("jemalloc ") + version;
  }
  return file;  // libjemalloc.so.2, libtcmalloc_minimal.so.4, libasan.so.8, ...
}

}  // namespace sluice::app
