#pragma once
// Spring AMQP's SimpleMessageListenerContainer scaling, made exact.
//
// Each consumer lives in cycles. A cycle ends when the consumer has had batch_size
// deliveries, or when receive_timeout passes with no delivery (counted from the
// cycle's start or its latest delivery). A cycle is
//   - active when it had at least one delivery,
//   - idle when it had none and the consumer holds nothing unsettled,
//   - neither when it had none but the consumer still holds deliveries (the work is
//     stuck downstream, not missing): both counters keep their value.
// On the consecutive_active_trigger-th consecutive active cycle (the 10th by
// default; Spring's own counter fires on the 12th, its post-increment compared with
// '>') another consumer is started if there are fewer than the maximum and the
// latest start was at least start_interval ago; the counter starts again either way.
// On the consecutive_idle_trigger-th consecutive idle cycle this consumer is stopped
// if there are more than the minimum and the latest stop was at least stop_interval
// ago. A consumer over a lowered maximum stops at its next cycle's end. The decision is
// the container's trigger scaler's (runtime/trigger_scaler.hpp). Pure logic.

#include <chrono>

#include "runtime/trigger_scaler.hpp"

namespace sluice::amqp {

class ConsumerScaler {
 public:
  using Clock = std::chrono::steady_clock;
  struct Config {
    int min_consumers = 1;
    int max_consumers = 1;
    int active_trigger = 10;
    int idle_trigger = 10;
    std::chrono::milliseconds start_interval{10000};
    std::chrono::milliseconds stop_interval{60000};
    int batch_size = 1;
    std::chrono::milliseconds receive_timeout{1000};
  };
  using Scaler = runtime::TriggerScaler<Clock>;
  struct Cycle {
    Clock::time_point started{};
    Clock::time_point last_delivery{};
    int deliveries = 0;
    Scaler::Counts counts;  // consecutive active and idle cycles
  };
  using Decision = Scaler::Decision;

  explicit ConsumerScaler(Config config)
      : config_(config),
        scaler_({config.min_consumers, config.max_consumers, config.active_trigger,
                 config.idle_trigger, config.start_interval, config.stop_interval,
                 /*restart_count_when_refused=*/true}) {}
  const Config& config() const { return config_; }
  void reconfigure(int min_consumers, int max_consumers) {
    config_.min_consumers = min_consumers;
    config_.max_consumers = max_consumers;
    scaler_.reconfigure(min_consumers, max_consumers);
  }

  void begin(Cycle& cycle, Clock::time_point now) const {
    cycle.started = cycle.last_delivery = now;
    cycle.deliveries = 0;
  }

  Decision on_delivery(Cycle& cycle, int consumers, Clock::time_point now) {
    ++cycle.deliveries;
    cycle.last_delivery = now;
    if (cycle.deliveries < config_.batch_size) return Decision::keep;
    return end_cycle(cycle, consumers, /*holding=*/true, now);
  }

  // Called every so often (a fraction of receive_timeout): ends the cycle when it
  // has timed out.
  Decision on_tick(Cycle& cycle, int consumers, bool holding, Clock::time_point now) {
    if (now - cycle.last_delivery < config_.receive_timeout) return Decision::keep;
    return end_cycle(cycle, consumers, holding, now);
  }

 private:
  Decision end_cycle(Cycle& cycle, int consumers, bool holding, Clock::time_point now) {
    using Observation = Scaler::Observation;
    const auto what = cycle.deliveries > 0 ? Observation::busy
                      : holding            ? Observation::holding
                                           : Observation::idle;
    begin(cycle, now);
    return scaler_.observe(cycle.counts, what, consumers, /*may_start=*/true, now);
  }

  Config config_;
  Scaler scaler_;
};

}  // namespace sluice::amqp
