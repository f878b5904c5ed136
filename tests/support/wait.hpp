#pragma once
// Polls a condition until it holds or the timeout passes; returns whether it held.
#include <chrono>
#include <functional>
#include <thread>

namespace sluice::test {

inline bool wait_until(const std::function<bool()>& condition,
                       std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return condition();
}

}  // namespace sluice::test
