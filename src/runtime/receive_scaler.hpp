#pragma once
// Elastic concurrent receives (runtime/trigger_scaler.hpp): a receive loop that keeps
// coming back full asks for another loop; one that keeps coming back empty stops, down
// to the minimum. Pure logic; called from the container's I/O thread only.

#include <chrono>

#include "runtime/clock.hpp"
#include "runtime/trigger_scaler.hpp"

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
  using Scaler = TriggerScaler<Clock>;
  using LoopState = Scaler::Counts;
  using Decision = Scaler::Decision;

  explicit ReceiveScaler(Config config)
      : config_(config),
        scaler_({config.min_receives, config.max_receives, config.full_trigger,
                 config.empty_trigger, config.start_interval, config.stop_interval,
                 /*restart_count_when_refused=*/false}) {}
  void reconfigure(int min_receives, int max_receives) {
    config_.min_receives = min_receives;
    config_.max_receives = max_receives;
    scaler_.reconfigure(min_receives, max_receives);
  }
  const Config& config() const { return config_; }

  // After one poll of one loop: `full` when it returned as many as a poll can carry; a
  // poll neither full nor empty breaks both runs.
  Decision after_poll(LoopState& loop, std::size_t received, bool full, int active,
                      bool permits_for_another, Clock::time_point now) {
    using Observation = Scaler::Observation;
    const auto what = full            ? Observation::busy
                      : received == 0 ? Observation::idle
                                      : Observation::partial;
    return scaler_.observe(loop, what, active, permits_for_another, now);
  }

 private:
  Config config_;
  Scaler scaler_;
};

}  // namespace sluice::runtime
