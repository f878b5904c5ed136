#pragma once
// Gathers entries (deletes, visibility changes) from any thread and sends them in
// batches: as soon as a batch is full, or when the flush interval passes. Several
// batches may be in flight at once (up to max_concurrent_flushes). drain() sends
// everything still pending and waits for it: nothing is left behind on stop.
// Eager mode sends a partial batch at once whenever no send is in flight (entries
// that arrive meanwhile make the next batch): for settlements that gate the next
// delivery, such as FIFO deletes, where waiting for company only adds latency.

#include <atomic>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include "runtime/clock.hpp"
#include <boost/asio/use_awaitable.hpp>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "runtime/async_wait.hpp"
#include "runtime/log_exceptions.hpp"

namespace sluice::runtime {

template <class Entry>
class Batcher : public std::enable_shared_from_this<Batcher<Entry>> {
 public:
  using Send = std::function<boost::asio::awaitable<void>(std::vector<Entry>)>;

  Batcher(boost::asio::any_io_executor executor, std::size_t batch_size,
          std::chrono::milliseconds interval, Send send, int max_concurrent_flushes = 16)
      : executor_(std::move(executor)),
        batch_size_(batch_size),
        interval_(interval),
        send_(std::move(send)),
        max_flushes_(max_concurrent_flushes) {}

  // More (or fewer) batches in flight from now on: a long round trip needs more of them
  // to carry the same rate. Any thread.
  void set_max_concurrent_flushes(int n) { max_flushes_.store(std::max(1, n)); }

  void set_eager(bool eager) { eager_ = eager; }

  void start() {
    auto self = this->shared_from_this();
    boost::asio::co_spawn(
        executor_, [self]() { return self->timer_loop(); }, log_if_thrown("batcher timer"));
  }

  // Thread-safe.
  void add(Entry entry) {
    bool kick = false, partial = false;
    {
      std::lock_guard lock(mutex_);
      pending_.push_back(std::move(entry));
      partial = eager_ && flushes_ == 0;
      kick = (pending_.size() >= batch_size_ || partial) && flushes_ < max_flushes_;
      if (kick) ++flushes_;
    }
    if (kick) spawn_flush(partial);
  }

  // Sends what is pending now, a partial batch if need be, unless a send is in flight
  // already (what is pending goes with the next one): for when settlements hold up
  // intake and waiting for the timer would idle the permits they hold. Thread-safe.
  void flush_now() {
    bool kick = false;
    {
      std::lock_guard lock(mutex_);
      if (pending_.empty() || stopped_) return;
      urgent_ = true;  // a send in flight goes on with what is pending, partial or not
      kick = flushes_ == 0;
      if (kick) ++flushes_;
    }
    if (kick) spawn_flush(true);
  }

  std::size_t pending() const {
    std::lock_guard lock(mutex_);
    return pending_.size();
  }

  // Sends everything pending (any size), waits for in-flight sends, stops the timer.
  boost::asio::awaitable<void> drain() {
    stopped_ = true;
    timer_.cancel();
    for (;;) {
      std::vector<Entry> batch;
      int flushes = 0;
      {
        std::lock_guard lock(mutex_);
        batch = take_locked();
        flushes = flushes_;
      }
      if (!batch.empty()) {
        co_await send_(std::move(batch));
        continue;
      }
      if (flushes == 0) co_return;
      // The last send in flight tells us (stopped_ is set): then what came meanwhile goes.
      co_await idle_.wait_until(CoreClock::time_point::max(), [this] {
        std::lock_guard lock(mutex_);
        return flushes_ == 0;
      });
    }
  }

 private:
  std::vector<Entry> take_locked() {
    std::vector<Entry> batch;
    const std::size_t n = std::min(batch_size_, pending_.size());
    batch.reserve(n);
    std::move(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(n),
              std::back_inserter(batch));
    pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(n));
    return batch;
  }

  // Under mutex_: a flush ends; a drain waiting for the last one hears of it.
  void release_slot_locked() {
    if (--flushes_ == 0 && stopped_) idle_.notify();
  }

  void spawn_flush(bool partial_first) {
    auto self = this->shared_from_this();
    boost::asio::co_spawn(
        executor_, [self, partial_first]() { return self->flush_loop(partial_first); },
        log_if_thrown("batcher flush"));
  }

  // Holds one flush slot; keeps sending while full batches are waiting. Only the
  // timer sends a partial batch (its first one).
  boost::asio::awaitable<void> flush_loop(bool partial_first = false) {
    for (bool first = true;; first = false) {
      std::vector<Entry> batch;
      {
        std::lock_guard lock(mutex_);
        if (!(first && partial_first) && !eager_ && !urgent_ && pending_.size() < batch_size_) {
          release_slot_locked();
          co_return;
        }
        batch = take_locked();
        if (pending_.empty()) urgent_ = false;
        if (batch.empty()) {
          release_slot_locked();
          co_return;
        }
      }
      try {
        co_await send_(std::move(batch));
      } catch (...) {  // a send that throws must not keep its flush slot forever
        std::lock_guard lock(mutex_);
        release_slot_locked();
        throw;
      }
    }
  }

  boost::asio::awaitable<void> timer_loop() {
    while (!stopped_) {
      timer_.expires_after(interval_);
      auto [ec] = co_await timer_.async_wait(boost::asio::as_tuple(boost::asio::use_awaitable));
      if (ec || stopped_) co_return;
      bool kick = false;
      {
        std::lock_guard lock(mutex_);
        kick = !pending_.empty() && flushes_ < max_flushes_;
        if (kick) ++flushes_;
      }
      if (!kick) continue;
      try {
        co_await flush_loop(true);
      } catch (...) {  // the send's failure is its own; the timer goes on
        spdlog::error("event=batcher_send_failed error=\"{}\"", describe_current_exception());
      }
    }
  }

  boost::asio::any_io_executor executor_;
  const std::size_t batch_size_;
  const std::chrono::milliseconds interval_;
  Send send_;
  std::atomic<int> max_flushes_;
  mutable std::mutex mutex_;
  std::vector<Entry> pending_;
  int flushes_ = 0;
  std::atomic<bool> stopped_{false};
  std::atomic<bool> eager_{false};
  bool urgent_ = false;  // flush_now() asked: partial batches until nothing is pending (mutex_)
  CoreTimer timer_{executor_};
  AsyncCondition idle_{executor_};  // drain() waits on it for flushes_ to reach 0
};

}  // namespace sluice::runtime
