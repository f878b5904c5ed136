#pragma once
// When `sluice run --until-drained` may stop: the queue shows nothing ready and
// nothing in flight, and this instance holds nothing (messages held, acks not yet
// confirmed, deliveries its source holds unacknowledged, records queued for the
// writers), without a break, for `drained_for`.
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace sluice::app {

struct DrainInputs {
  long ready = 0;
  long queue_in_flight = 0;  // -1: the queue does not report it
  std::int64_t held = 0;
  std::int64_t pending_acks = 0;
  std::int64_t source_unacknowledged = 0;
  std::size_t writer_queued = 0;
};

class DrainDetector {
 public:
  using Clock = std::chrono::steady_clock;
  explicit DrainDetector(std::chrono::milliseconds drained_for) : drained_for_(drained_for) {}

  // True once everything has been idle for `drained_for`.
  bool observe(const DrainInputs& in, Clock::time_point now) {
    const bool idle = in.ready == 0 && in.queue_in_flight <= 0 && in.held == 0 &&
                      in.pending_acks == 0 && in.source_unacknowledged == 0 &&
                      in.writer_queued == 0;
    if (!idle) {
      idle_since_ = {};
      return false;
    }
    if (idle_since_ == Clock::time_point{}) idle_since_ = now;
    return now - idle_since_ >= drained_for_;
  }
  // When the idle stretch began (the end of the work): the epoch while busy.
  Clock::time_point idle_since() const { return idle_since_; }

 private:
  std::chrono::milliseconds drained_for_;
  Clock::time_point idle_since_{};
};

}  // namespace sluice::app
