#pragma once
// `concurrency: auto`: the number of concurrent receives found by measuring, the way one
// tunes it by hand: raise receives while throughput rises and the consumer keeps up; stop
// where throughput plateaus; fall back when idle.
//
// Measured in windows (at least `min_window`, and `window_polls` round trips long);
// the first round trips after a change are not counted. Phases:
//  - growing: double the receives while each doubling brings at least `grow_gain` more
//    messages per second (a linear region doubles; a plateau does not);
//  - refining: bisect between the largest level measured below `near_best` of the best
//    rate and the smallest measured at it, for the smallest level that reaches it
//    (more receives than that only ask for smaller batches: more requests);
//  - holding: keep it; after `hold`, probe one step up (a quarter more) and keep the
//    step only if it brings `probe_gain`, else step back and hold again; when receives
//    come back partial instead, probe a quarter down and keep stepping down while the
//    rate stays within `near_best` (fewer requests for the same messages).
// Never above `max` (which the container derives from max_in_flight / batch size, so
// receives can never ask for more than max_in_flight). When most receives could not
// ask for a full batch, or the loops waited for permits longer than they spent
// receiving, the consumer (handlers, sink, acknowledgements) is the bottleneck: no
// more receives, and a quarter fewer per window while the rate stays within `near_best`
// of the best of that descent (a step that does not is taken back and held). When a
// window received nothing: back to `min`, and the search starts again when work
// returns. Pure logic; called from the container's I/O thread only.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <map>

#include "runtime/clock.hpp"

namespace sluice::runtime {

class AutoConcurrency {
 public:
  using Clock = CoreClock;
  struct Config {
    int min = 1;
    int max = 64;
    std::chrono::milliseconds min_window{1000};
    int window_polls = 10;  // a window spans at least this many mean round trips
    double grow_gain = 0.10;
    double near_best = 0.95;
    double probe_gain = 0.10;
    std::chrono::milliseconds hold{30000};
  };
  enum class Phase { growing, refining, holding, probing, probing_down };

  explicit AutoConcurrency(Config config) : config_(config), level_(config.min) {}

  int level() const { return level_; }
  Phase phase() const { return phase_; }
  // The rate measured at each level in the current search (messages per second).
  const std::map<int, double>& rates() const { return rates_; }
  double last_rate() const { return last_rate_; }
  static const char* name(Phase p) {
    switch (p) {
      case Phase::growing:
        return "growing";
      case Phase::refining:
        return "refining";
      case Phase::holding:
        return "holding";
      case Phase::probing:
        return "probing";
      case Phase::probing_down:
        return "probing_down";
    }
    return "?";
  }

  // A receive failed (endpoint down, throttled): the time it took says nothing of
  // throughput; the window starts again.
  void interrupted(Clock::time_point now) {
    if (started_) begin_window(now, mean_latency_);
  }

  // After each completed receive: how many messages it brought, how many it could ask
  // for (fewer than `max_batch`: permits were short), its round trip, and how long it
  // waited for permits before it could ask. Returns the wanted number of receive loops.
  int after_poll(std::size_t received, int asked, int max_batch, Clock::duration latency,
                 Clock::time_point now, Clock::duration permit_wait = {}) {
    if (!started_) {
      started_ = true;
      begin_window(now, latency);
    }
    // A moving mean: an idle spell of long polls must not stretch the windows for long.
    mean_latency_ = latency_count_++ == 0 ? latency : (mean_latency_ * 7 + latency) / 8;
    if (now < counting_from_) return level_;  // round trips begun before the last change
    if (window_polls_ == 0) window_start_ = now;
    ++window_polls_;
    window_messages_ += received;
    window_waited_ += permit_wait;
    window_busy_ += latency;
    if (static_cast<int>(received) >= max_batch) ++window_full_;
    if (asked < max_batch) ++window_short_;
    const auto mean_latency = mean_latency_;
    const auto span = now - window_start_;
    if (span < config_.min_window || span < mean_latency * config_.window_polls ||
        window_polls_ < level_)
      return level_;
    decide(static_cast<double>(window_messages_) / std::chrono::duration<double>(span).count(), now,
           mean_latency);
    return level_;
  }

 private:
  void begin_window(Clock::time_point now, Clock::duration latency) {
    // Skip the round trips already under way at the old level (two of them).
    counting_from_ = now + 2 * latency;
    window_start_ = counting_from_;
    window_polls_ = window_messages_ = 0;
    window_full_ = window_short_ = 0;
    window_waited_ = window_busy_ = {};
  }

  void set_level(int level, Phase phase, Clock::time_point now, Clock::duration latency) {
    level_ = std::clamp(level, config_.min, config_.max);
    phase_ = phase;
    if (phase == Phase::growing || phase == Phase::refining) forget_descents();
    begin_window(now, latency);
  }

  // A new search (or work returning after idle): earlier descents say nothing of it.
  void forget_descents() {
    descending_ = thinning_ = false;
    thinning_reference_ = 0;
  }

  double best_rate() const {
    double best = 0;
    for (const auto& [level, rate] : rates_) best = std::max(best, rate);
    return best;
  }

  void decide(double rate, Clock::time_point now, Clock::duration latency) {
    last_rate_ = rate;
    const double polls = static_cast<double>(window_polls_);
    if (window_messages_ == 0) {  // idle: fall back, search again when work returns
      rates_.clear();
      set_level(config_.min, Phase::growing, now, latency);
      return;
    }
    const double waited = std::chrono::duration<double>(window_waited_).count();
    const double busy = std::chrono::duration<double>(window_busy_).count();
    // The consumer (handlers, sink, acknowledgements), not the queue, holds the permits:
    // more receives would only wait for them and ask for small batches.
    const bool permit_bound = window_short_ / polls > 0.5 || waited > busy;
    const bool backlog = window_full_ / polls >= 0.5;  // receives come back full
    rates_[level_] = rate;
    switch (phase_) {
      case Phase::growing: {
        auto previous = rates_.find(previous_level_);
        const bool first = previous_level_ == 0 || previous == rates_.end();
        const bool rose = first || rate >= previous->second * (1 + config_.grow_gain);
        if (rose && backlog && !permit_bound && level_ < config_.max) {
          previous_level_ = level_;
          set_level(level_ * 2, Phase::growing, now, latency);
        } else {
          // The plateau (or the end of the backlog) is reached: bisect between the
          // largest level measured below near_best of the best rate and the smallest
          // one measured at it.
          const double target = config_.near_best * best_rate();
          high_ = level_;
          for (const auto& [level, r] : rates_)
            if (r >= target) {
              high_ = level;
              break;
            }
          low_ = 0;
          for (const auto& [level, r] : rates_)
            if (level < high_ && r < target) low_ = level;
          refine(now, latency);
        }
        break;
      }
      case Phase::refining:
        if (rate >= config_.near_best * best_rate())
          high_ = level_;
        else
          low_ = level_;
        refine(now, latency);
        break;
      case Phase::holding:
        if (!permit_bound) descending_ = false;
        if (backlog) {  // the receives set the rate again: a later descent starts afresh
          thinning_ = false;
          thinning_reference_ = 0;
        }
        if (permit_bound && level_ > config_.min && now >= hold_until_) {
          // Fewer receives, kept only if the rate holds (the consumer sets it), measured
          // against the rates of this descent only (older ones may predate a slower sink).
          if (!descending_) {
            rates_.clear();
            rates_[level_] = rate;
            descending_ = true;
          }
          previous_level_ = level_;
          set_level(level_ * 3 / 4, Phase::probing_down, now, latency);
        } else if (now >= hold_until_ && backlog && level_ < config_.max) {
          previous_level_ = level_;
          set_level(level_ + std::max(1, level_ / 4), Phase::probing, now, latency);
        } else if (now >= hold_until_ && !backlog && level_ > config_.min) {
          // Receives come back partial: the queue, not the number of receives, sets the
          // rate, and fewer receives would bring the same messages in fewer requests. A
          // search misled by a noisy window settles too high; so does a plateau that moved
          // down. A quarter fewer, kept while the rate holds (as for permit waits).
          // Every step is measured against the rate where thinning first began, kept
          // across rejected steps and holds: 5 % losses must not add up, hold after hold.
          if (thinning_reference_ == 0) thinning_reference_ = rate;
          thinning_ = true;
          rates_[level_] = rate;
          previous_level_ = level_;
          set_level(level_ * 3 / 4, Phase::probing_down, now, latency);
        } else {
          begin_window(now, latency);
        }
        break;
      case Phase::probing_down: {
        // Against the best rate seen, not the last step's: small losses must not add up.
        const double reference = thinning_ ? thinning_reference_ : best_rate();
        if (rate >= config_.near_best * reference) {
          set_level(level_, Phase::holding, now, latency);
          hold_until_ = now;  // the next window may step down again
        } else {
          set_level(previous_level_, Phase::holding, now, latency);
          hold_until_ = now + config_.hold;
          descending_ = thinning_ = false;
        }
        break;
      }
      case Phase::probing: {
        const double before = rates_.count(previous_level_) ? rates_[previous_level_] : 0;
        if (rate >= before * (1 + config_.probe_gain)) {
          previous_level_ = level_;
          set_level(level_ * 2, Phase::growing, now, latency);  // the plateau moved up
        } else {
          set_level(previous_level_, Phase::holding, now, latency);
          hold_until_ = now + config_.hold;
          descending_ = false;
        }
        break;
      }
    }
  }

  // Bisects (low_, high_]: low_ measured below near_best of the best, high_ at it.
  void refine(Clock::time_point now, Clock::duration latency) {
    if (low_ == 0 || high_ - low_ <= std::max(1, high_ / 8)) {
      forget_descents();
      set_level(high_, Phase::holding, now, latency);
      hold_until_ = now + config_.hold;
      return;
    }
    set_level((low_ + high_) / 2, Phase::refining, now, latency);
  }

  Config config_;
  int level_;
  Phase phase_ = Phase::growing;
  bool started_ = false;
  int previous_level_ = 0;
  int low_ = 0, high_ = 0;
  std::map<int, double> rates_;
  double last_rate_ = 0;
  bool descending_ = false;        // stepping down while the loops wait for permits
  bool thinning_ = false;          // stepping down while receives come back partial
  double thinning_reference_ = 0;  // the rate where thinning began (0: none since the search)
  Clock::time_point counting_from_{}, window_start_{}, hold_until_{};
  long window_polls_ = 0;
  std::size_t window_messages_ = 0;
  long window_full_ = 0, window_short_ = 0;
  Clock::duration window_waited_{}, window_busy_{};  // for permits; in receives
  Clock::duration mean_latency_{};
  long latency_count_ = 0;
};

}  // namespace sluice::runtime
