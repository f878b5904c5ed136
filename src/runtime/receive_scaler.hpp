#pragma once
// Elastic concurrent receives, in the spirit of Spring AMQP's consecutive
// active/idle triggers: a receive loop that keeps coming back full asks for
// another loop; one that keeps coming back empty stops, down to the minimum.
// Pure logic; called from the container's I/O thread only.

#include <chrono>

#include "runtime/clock.hpp"

namespace sluice::runtime {

class ReceiveScaler {
 public:
  using Clock = CoreClock;
  struct Config {
    int min_receives = 1;
    int max_receives = 4;
    int full_trigger = 3;
    int empty_trigger = 3;
    std::chrono::milliseconds start_interval{500};
    std::chrono::milliseconds stop_interval{5000};
  };
  struct LoopState {
    int consecutive_full = 0;
    int consecutive_empty = 0;
  };
  enum class Decision { keep, start_another, stop_this };

  explicit ReceiveScaler(Config config) : config_(config) {}
  void reconfigure(int min_receives, int max_receives) {
    config_.min_receives = min_receives;
    config_.max_receives = max_receives;
  }
  const Config& config() const { return config_; }

  // After one poll of one loop: `full` when it returned as many as a poll can carry.
  Decision after_poll(LoopState& loop, std::size_t received, bool full, int active,
                      bool permits_for_another, Clock::time_point now) {
    if (full) {
      ++loop.consecutive_full;
      loop.consecutive_empty = 0;
    } else if (received == 0) {
      ++loop.consecutive_empty;
      loop.consecutive_full = 0;
    } else {
      loop.consecutive_full = loop.consecutive_empty = 0;
    }
    if (active > config_.max_receives) {
      last_stop_ = now;
      return Decision::stop_this;  // the maximum was lowered while running
    }
    if (loop.consecutive_full >= config_.full_trigger && active < config_.max_receives &&
        permits_for_another && now - last_start_ >= config_.start_interval) {
      loop.consecutive_full = 0;
      last_start_ = now;
      return Decision::start_another;
    }
    if (loop.consecutive_empty >= config_.empty_trigger && active > config_.min_receives &&
        now - last_stop_ >= config_.stop_interval) {
      loop.consecutive_empty = 0;
      last_stop_ = now;
      return Decision::stop_this;
    }
    return Decision::keep;
  }

 private:
  Config config_;
  Clock::time_point last_start_{};
  Clock::time_point last_stop_{};
};

}  // namespace sluice::runtime
