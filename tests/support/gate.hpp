#pragma once
// Blocks handlers until opened.
#include <condition_variable>
#include <mutex>

namespace sluice::test {

class Gate {
 public:
  void wait() {
    std::unique_lock lock(m_);
    cv_.wait(lock, [&] { return open_; });
  }
  void open() {
    {
      std::lock_guard lock(m_);
      open_ = true;
    }
    cv_.notify_all();
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  bool open_ = false;
};

}  // namespace sluice::test
