#pragma once
// Waits for an event: polls a condition until it holds or the bound passes, and returns
// whether it held. The bound is generous (a loaded machine is slow, not wrong); the
// polls back off from 1 ms to 50 ms, so a quick event is seen at once and a slow one
// costs little CPU.
#include <algorithm>
#include <chrono>
#include <functional>
#include <thread>

namespace sluice::test {

inline bool wait_until(const std::function<bool()>& condition,
                       std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::chrono::milliseconds pause{1};
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(pause);  // the poll's own back-off, not a wait for an event
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
  return condition();
}

}  // namespace sluice::test
