#pragma once
// A queue check at start that runs elsewhere (another thread, an I/O loop run in
// slices): waited for at most 15 s, while no signal comes.

#include <chrono>
#include <functional>

namespace sluice::driver {

enum class Check { exists, missing, unknown, interrupted };

// `ready(slice)` waits up to `slice` and says whether the check has finished.
template <class Wait>
Check wait_for_check(Wait&& ready, const std::function<bool()>& signalled) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  while (!ready(std::chrono::milliseconds(100))) {
    if (signalled()) return Check::interrupted;
    if (std::chrono::steady_clock::now() >= until) return Check::unknown;
  }
  return signalled() ? Check::interrupted : Check::exists;  // the caller reads the result
}

}  // namespace sluice::driver
