#pragma once
// A token bucket for source.max_messages_per_second: `rate` tokens a second, at most
// `burst` in existence. A receive takes tokens before it asks (one per message it may
// get) and hands back, when it returns, what it did not use. Tokens held by receives
// still open count against the bucket, so several receive loops (each a long poll that
// may wait 20 s) never hold more than `burst` between them: over any window T the
// messages received stay within rate x T + burst. Pure logic with the clock passed in;
// the receive loops all run on one thread, so it takes no lock.

#include <algorithm>
#include <chrono>
#include <cmath>

#include "runtime/clock.hpp"

namespace sluice::runtime {

class TokenBucket {
 public:
  using Clock = CoreClock;
  // The lowest rate: below it a wait would not fit the clock's range.
  static constexpr double kMinRate = 0.001;

  TokenBucket(double rate, double burst, Clock::time_point now)
      : rate_(std::max(rate, kMinRate)),
        burst_(std::max(1.0, burst)),
        tokens_(burst_),
        updated_(now) {}

  // `wanted` tokens, or the whole bucket when it holds fewer: what was taken, or 0
  // when there are not that many yet (`wait` then says how long until there are).
  // Waiting for a full receive's worth keeps receives full at any rate.
  int take(int wanted, Clock::time_point now, Clock::duration& wait) {
    refill(now);
    const int needed = std::clamp(wanted, 1, static_cast<int>(std::floor(burst_)));
    if (tokens_ < needed) {
      // Tokens held by open receives come back when they return: until then the
      // bucket cannot fill, so the wait is at least the refill's.
      const double seconds = std::min((needed - tokens_) / rate_, 3600.0);
      wait = std::max(Clock::duration(1),
                      std::chrono::ceil<Clock::duration>(std::chrono::duration<double>(seconds)));
      return 0;
    }
    tokens_ -= needed;
    outstanding_ += needed;
    return needed;
  }
  // A receive that took `taken` returned `used` messages: the rest come back.
  void returned(int taken, int used) {
    outstanding_ = std::max(0.0, outstanding_ - taken);
    tokens_ = std::min(burst_ - outstanding_, tokens_ + std::max(0, taken - used));
  }

  double rate() const { return rate_; }
  double burst() const { return burst_; }

 private:
  void refill(Clock::time_point now) {
    if (now <= updated_) return;
    tokens_ = std::min(burst_ - outstanding_,
                       tokens_ + std::chrono::duration<double>(now - updated_).count() * rate_);
    updated_ = now;
  }

  double rate_;
  double burst_;
  double tokens_;
  double outstanding_ = 0;  // taken by receives still open
  Clock::time_point updated_;
};

}  // namespace sluice::runtime
