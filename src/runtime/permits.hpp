#pragma once
// In-flight permits: a receive takes permits before it asks for messages and each
// settled message gives one back. Waiting is asynchronous (a coroutine suspends);
// releasing is thread-safe (workers settle messages on their own threads).

#include <algorithm>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/experimental/concurrent_channel.hpp>
#include <chrono>
#include <memory>
#include <mutex>
#include <vector>

namespace sluice::runtime {

class Permits {
 public:
  // Waiters are woken once `wake_threshold` permits are free (a receive that could ask
  // for one message is rarely worth a wake-up and a request), or, with fewer free, after
  // `linger`: so that a few slow messages never idle the free permits (the head-of-line
  // blocking of a listener that waits for a whole batch, at a small max_in_flight), while
  // a busy container still asks for full batches.
  explicit Permits(int total, int wake_threshold = 1)
      : total_(total), wake_threshold_(std::clamp(wake_threshold, 1, total)), available_(total) {}
  // Once the source says how many messages a receive can carry.
  void set_wake_threshold(int threshold) {
    std::lock_guard lock(mutex_);
    wake_threshold_ = std::clamp(threshold, 1, total_);
  }

  static constexpr std::chrono::milliseconds linger{20};

  // Waits until at least one permit is free, then takes up to `max`. Returns 0 when
  // closed. Cancellable (throws boost::system::system_error on cancellation).
  boost::asio::awaitable<int> acquire_up_to(int max);
  void release(int count);
  void close();  // wakes every waiter with 0

  int available() const;
  int in_use() const { return total_ - available(); }
  int total() const { return total_; }

 private:
  using Signal = boost::asio::experimental::concurrent_channel<void(boost::system::error_code)>;
  void wake(std::vector<std::shared_ptr<Signal>>& list);  // under mutex_
  const int total_;
  int wake_threshold_;
  mutable std::mutex mutex_;
  int available_;
  bool closed_ = false;
  std::vector<std::shared_ptr<Signal>> waiters_;        // some free: for the threshold
  std::vector<std::shared_ptr<Signal>> empty_waiters_;  // none free: for any
};

}  // namespace sluice::runtime
