#pragma once
// Elastic workers by consecutive triggers, in the spirit of Spring AMQP's consecutive
// active and idle triggers, for both kinds of worker Sluice scales: the container's
// receive loops (runtime/receive_scaler.hpp: a poll is busy when it came back full) and
// a RabbitMQ source's consumers (amqp/consumer_scaler.hpp: a cycle is busy when it had a
// delivery). A worker busy `busy_trigger` times in a row asks for another (up to `max`,
// at most one start per start_interval); one idle `idle_trigger` times in a row stops
// (down to `min`, at most one stop per stop_interval); a worker over a lowered maximum
// stops at once. Pure logic, on one thread.
//
// The two workers differ in two details, options here (tests/unit/scale_test.cpp):
//  - what breaks a run: a receive neither full nor empty resets both counts
//    (Observation::partial), while a consumer's cycle without a delivery whose earlier
//    deliveries are still held keeps both (Observation::holding: the work is stuck
//    downstream, not missing);
//  - a trigger whose action is refused (at the maximum, too soon after the last, no
//    permits): a receive loop keeps counting, so the start comes as soon as it is
//    allowed; a consumer starts counting again, as Spring's do
//    (restart_count_when_refused).
#include <chrono>

namespace sluice::runtime {

template <class Clock>
class TriggerScaler {
 public:
  struct Config {
    int min = 1;
    int max = 1;
    int busy_trigger = 3;
    int idle_trigger = 3;
    std::chrono::milliseconds start_interval{500};
    std::chrono::milliseconds stop_interval{5000};
    bool restart_count_when_refused = false;
  };
  // One worker's run of busy or idle observations.
  struct Counts {
    int busy = 0;
    int idle = 0;
  };
  enum class Observation { busy, idle, partial, holding };
  enum class Decision { keep, start_another, stop_this };

  explicit TriggerScaler(Config config) : config_(config) {}
  const Config& config() const { return config_; }
  void reconfigure(int min, int max) {
    config_.min = min;
    config_.max = max;
  }

  // After one observation of one worker, of `active` workers. `may_start`: there is
  // room for another besides the maximum (the container's permits).
  Decision observe(Counts& counts, Observation what, int active, bool may_start,
                   typename Clock::time_point now) {
    switch (what) {
      case Observation::busy:
        ++counts.busy;
        counts.idle = 0;
        break;
      case Observation::idle:
        ++counts.idle;
        counts.busy = 0;
        break;
      case Observation::partial:
        counts.busy = counts.idle = 0;
        break;
      case Observation::holding:
        break;
    }
    if (active > config_.max) {
      last_stop_ = now;
      return Decision::stop_this;  // the maximum was lowered while running
    }
    if (what == Observation::busy && counts.busy >= config_.busy_trigger) {
      const bool allowed =
          active < config_.max && may_start && now - last_start_ >= config_.start_interval;
      if (allowed || config_.restart_count_when_refused) counts.busy = 0;
      if (!allowed) return Decision::keep;
      last_start_ = now;
      return Decision::start_another;
    }
    if (what == Observation::idle && counts.idle >= config_.idle_trigger) {
      const bool allowed = active > config_.min && now - last_stop_ >= config_.stop_interval;
      if (allowed || config_.restart_count_when_refused) counts.idle = 0;
      if (!allowed) return Decision::keep;
      last_stop_ = now;
      return Decision::stop_this;
    }
    return Decision::keep;
  }

 private:
  Config config_;
  typename Clock::time_point last_start_{};
  typename Clock::time_point last_stop_{};
};

}  // namespace sluice::runtime
