#pragma once
// The core's time: one seam for every "now" and every timer of the container core
// (src/runtime: the receive loops' backoff and rate limit, permits, heartbeat, batchers,
// scalers, the stop's deadline). The sources' own timers and the sink writers (threads
// and condition variables) are not on it yet. In production it is the
// steady clock and Asio's timer. The deterministic simulation (tests/sim) installs a
// VirtualClock: time then moves only when the simulation advances it, once every ready
// handler has run, and a timer's wait completes when the simulation reaches its
// deadline, in (deadline, order of waiting) order. It is reachable from test code only,
// never from a configuration.
//
// The virtual clock keeps std::chrono::steady_clock's time_point type (an offset from a
// fixed origin), so the public SPI (spi/delivery.hpp's lease_until) is unchanged: a
// source and the core compare the same type whichever clock runs.
//
// Virtual waits do not go through Asio's timer queue: on Linux its reactor learns that a
// timer is due from a kernel timer armed in real time (timerfd), which a virtual clock
// cannot drive. They are kept here and completed through the timer's executor, with
// Asio's semantics: success at the deadline, operation_aborted when the timer is
// cancelled, reset or destroyed, or when the wait's cancellation slot is emitted. Unlike
// Asio's, a pending virtual wait is no work of its context's: whoever polls it keeps the
// context from running out of work (a work guard), and drops the waits (drop_waits)
// before the context goes. A timer keeps the mode it was made in; installing a clock
// changes "now" for the whole process, so a simulation runs alone in its process.
#include <atomic>
#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <utility>

namespace sluice::runtime {

class VirtualClock;

namespace clock_detail {
// The installed virtual clock, or null (production).
extern std::atomic<VirtualClock*> installed;
inline VirtualClock* virtual_clock() {
  return installed.load(std::memory_order_acquire);
}
}  // namespace clock_detail

struct CoreClock {
  using duration = std::chrono::steady_clock::duration;
  using rep = duration::rep;
  using period = duration::period;
  using time_point = std::chrono::steady_clock::time_point;
  static constexpr bool is_steady = true;
  static time_point now() noexcept;
};

using WaitHandler = boost::asio::any_completion_handler<void(boost::system::error_code)>;

// Time that moves only when told. Install one with ScopedVirtualClock (tests only).
class VirtualClock {
 public:
  // `seed` seeds what the core draws at random while this clock is installed (the
  // failure backoff's jitter), so that a simulation's seed replays exactly.
  VirtualClock(CoreClock::time_point origin, std::uint64_t seed) : now_(origin), random_(seed) {}
  CoreClock::time_point now() const {
    std::lock_guard lock(mutex_);
    return now_;
  }
  // The earliest deadline a wait is pending on; none: nothing waits on time.
  std::optional<CoreClock::time_point> next_deadline() const;
  // Moves to `t` (never back) and completes every wait due by then, in order.
  void advance_to(CoreClock::time_point t);
  std::uint64_t random() {
    std::lock_guard lock(mutex_);
    return random_();
  }

  // Forgets every pending wait without completing it (their handlers, and the coroutines
  // they would resume, are destroyed): before the context they would run on goes.
  void drop_waits();

  // For CoreTimer.
  void wait(const void* timer, CoreClock::time_point deadline,
            boost::asio::any_io_executor executor, WaitHandler handler);
  std::size_t cancel(const void* timer);

 private:
  struct Wait {
    const void* timer;
    boost::asio::any_io_executor executor;
    WaitHandler handler;
  };
  using Key = std::pair<CoreClock::time_point, std::uint64_t>;  // deadline, order of waiting
  static void complete(Wait wait, boost::system::error_code ec, bool clear_slot = true);
  void cancel_one(Key key);

  mutable std::mutex mutex_;
  CoreClock::time_point now_;
  std::uint64_t next_order_ = 0;
  std::map<Key, Wait> waits_;
  std::mt19937_64 random_;
};

// Installs `clock` as the core's time for its scope (one at a time, per process).
class ScopedVirtualClock {
 public:
  explicit ScopedVirtualClock(VirtualClock& clock);
  ~ScopedVirtualClock();
  ScopedVirtualClock(const ScopedVirtualClock&) = delete;
  ScopedVirtualClock& operator=(const ScopedVirtualClock&) = delete;
};

inline CoreClock::time_point CoreClock::now() noexcept {
  if (VirtualClock* v = clock_detail::virtual_clock()) [[unlikely]]
    return v->now();
  return std::chrono::steady_clock::now();
}

// The core's timer: Asio's steady timer, or a virtual one when a VirtualClock was
// installed as it was made (a timer keeps the mode it was made in). The subset of
// basic_waitable_timer the core uses.
class CoreTimer {
  using Asio = boost::asio::basic_waitable_timer<std::chrono::steady_clock>;

 public:
  using clock_type = CoreClock;
  using time_point = CoreClock::time_point;
  using duration = CoreClock::duration;
  using executor_type = boost::asio::any_io_executor;

  template <typename Context>
  explicit CoreTimer(Context&& context)
      : timer_(std::forward<Context>(context)), virtual_(clock_detail::virtual_clock()) {}
  template <typename Context>
  CoreTimer(Context&& context, time_point expiry) : CoreTimer(std::forward<Context>(context)) {
    expires_at(expiry);
  }
  template <typename Context>
  CoreTimer(Context&& context, duration after) : CoreTimer(std::forward<Context>(context)) {
    expires_after(after);
  }
  ~CoreTimer() {
    if (virtual_) [[unlikely]]
      virtual_->cancel(this);
  }
  CoreTimer(const CoreTimer&) = delete;
  CoreTimer& operator=(const CoreTimer&) = delete;

  executor_type get_executor() { return timer_.get_executor(); }
  time_point expiry() const { return timer_.expiry(); }
  std::size_t expires_at(time_point expiry) {
    if (virtual_) [[unlikely]] {
      const std::size_t cancelled = virtual_->cancel(this);
      timer_.expires_at(expiry);
      return cancelled;
    }
    return timer_.expires_at(expiry);
  }
  std::size_t expires_after(duration after) {
    const auto now = CoreClock::now();
    // As Asio does: no overflow past the clock's end.
    return expires_at(after >= time_point::max() - now ? time_point::max() : now + after);
  }
  std::size_t cancel() {
    if (virtual_) [[unlikely]]
      return virtual_->cancel(this);
    return timer_.cancel();
  }

  template <typename Token>
  auto async_wait(Token&& token) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code)>(
        [this](auto handler) {
          if (virtual_) [[unlikely]]
            virtual_->wait(this, timer_.expiry(), timer_.get_executor(),
                           WaitHandler(std::move(handler)));
          else
            timer_.async_wait(std::move(handler));
        },
        token);
  }

 private:
  Asio timer_;  // keeps the expiry in both modes; waits on it in production
  VirtualClock* const virtual_;
};

}  // namespace sluice::runtime
