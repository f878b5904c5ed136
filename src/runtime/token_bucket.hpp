#pragma once
// A token bucket for source.max_messages_per_second: `rate` tokens a second, at most
// `burst` saved up. The receive loops take tokens before they receive (one per message
// they may receive) and give back what a receive did not use, so over any window T the
// messages received stay within rate * T + burst. Pure logic with the clock passed in;
// the receive loops all run on the I/O thread, so it takes no lock.

#include <algorithm>
#include <chrono>
#include <cmath>

namespace sluice::runtime {

class TokenBucket {
 public:
  using Clock = std::chrono::steady_clock;

  TokenBucket(double rate, double burst, Clock::time_point now)
      : rate_(rate), burst_(std::max(1.0, burst)), tokens_(burst_), updated_(now) {}

  // `wanted` tokens, or the whole bucket when it holds fewer: what was taken, or 0
  // when there are not that many yet (`wait` then says how long until there are).
  // Waiting for a full receive's worth keeps receives full at any rate.
  int take(int wanted, Clock::time_point now, Clock::duration& wait) {
    refill(now);
    const int needed = std::clamp(wanted, 1, static_cast<int>(std::floor(burst_)));
    if (tokens_ < needed) {
      wait = std::max(Clock::duration(1),
                      std::chrono::ceil<Clock::duration>(
                          std::chrono::duration<double>((needed - tokens_) / rate_)));
      return 0;
    }
    tokens_ -= needed;
    return needed;
  }
  // Tokens a receive took and did not use (it returned fewer messages).
  void give_back(int unused) { tokens_ = std::min(burst_, tokens_ + unused); }

  double rate() const { return rate_; }
  double burst() const { return burst_; }

 private:
  void refill(Clock::time_point now) {
    if (now <= updated_) return;
    tokens_ =
        std::min(burst_, tokens_ + std::chrono::duration<double>(now - updated_).count() * rate_);
    updated_ = now;
  }

  double rate_;
  double burst_;
  double tokens_;
  Clock::time_point updated_;
};

}  // namespace sluice::runtime
