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
// ago. A consumer over a lowered maximum stops at its next cycle's end. Pure logic.

#include <chrono>

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
  struct Cycle {
    Clock::time_point started{};
    Clock::time_point last_delivery{};
    int deliveries = 0;
    int consecutive_active = 0;
    int consecutive_idle = 0;
  };
  enum class Decision { keep, start_another, stop_this };

  explicit ConsumerScaler(Config config) : config_(config) {}
  const Config& config() const { return config_; }
  void reconfigure(int min_consumers, int max_consumers) {
    config_.min_consumers = min_consumers;
    config_.max_consumers = max_consumers;
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
    const bool active = cycle.deliveries > 0;
    begin(cycle, now);
    if (consumers > config_.max_consumers) {
      last_stop_ = now;
      return Decision::stop_this;
    }
    if (active) {
      cycle.consecutive_idle = 0;
      if (++cycle.consecutive_active < config_.active_trigger) return Decision::keep;
      cycle.consecutive_active = 0;
      if (consumers < config_.max_consumers && now - last_start_ >= config_.start_interval) {
        last_start_ = now;
        return Decision::start_another;
      }
      return Decision::keep;
    }
    if (holding) return Decision::keep;  // neither active nor idle
    cycle.consecutive_active = 0;
    if (++cycle.consecutive_idle < config_.idle_trigger) return Decision::keep;
    cycle.consecutive_idle = 0;
    if (consumers > config_.min_consumers && now - last_stop_ >= config_.stop_interval) {
      last_stop_ = now;
      return Decision::stop_this;
    }
    return Decision::keep;
  }

  Config config_;
  Clock::time_point last_start_{};
  Clock::time_point last_stop_{};
};

}  // namespace sluice::amqp
