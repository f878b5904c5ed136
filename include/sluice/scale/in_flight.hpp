#pragma once
// The in-flight scaling signal (the ECS in-flight autoscaling pattern), generalised to
// tasks that hold many messages. Pure logic: samples in, desired task count and task
// utilization out; no I/O.
//
//   in_flight_max_average = max over the last `periods` periods of the average
//                           in-flight count (SQS ApproximateNumberOfMessagesNotVisible,
//                           RabbitMQ messages_unacknowledged) in that period
//   tasks_needed          = in_flight_max_average / capacity + spare
//   desired_tasks         = ceil(tasks_needed)
//   utilization_percent   = 100 x tasks_needed / running   (running 0 counts as 1)
//
// `capacity` is how many messages one task works on at once. With capacity 1 (one
// message per task, as the pattern assumes) this is the pattern's formula exactly:
// desired = max average + spare, utilization = 100 x desired / running. A Sluice task on a
// standard queue holds up to its max_in_flight; on a FIFO queue, messages of as many
// groups as it works at once.
//
// Gates (each off at 0): scaling out only starts once the backlog (visible messages)
// or the age of the oldest message reaches its threshold; while a gate is closed the
// signal never asks for more than the running tasks (scaling in still happens).

#include <chrono>
#include <deque>
#include <string>
#include <vector>

namespace sluice::scale {

inline constexpr double kMaxTasks = 1e9;  // tasks_needed saturates here

struct SignalOptions {
  int periods = 5;
  std::chrono::milliseconds period{60'000};
  int spare = 1;
  double capacity = 1;
  double min_backlog = 0;       // gate on visible messages; 0: off
  double min_oldest_age_s = 0;  // gate on the oldest message's age; 0: off
};

// The inputs of the gates, as last read; a negative value is unknown.
struct GateInputs {
  double backlog = -1;
  double oldest_age_s = -1;
};

struct Signal {
  std::vector<double> period_averages;  // oldest first
  double in_flight_max_average = 0;
  double tasks_needed = 0;
  long desired_tasks = 0;
  double utilization_percent = 0;
  long running = 0;
  int spare = 0;
  double capacity = 1;
  bool gated = false;  // a gate held scaling out
  std::string gate;    // which one, and why
};

Signal compute_signal(const std::vector<double>& period_averages, long running,
                      const SignalOptions& options, const GateInputs& gates = {});

// Samples of the in-flight count, averaged per period. Periods are counted from the
// first sample; the current period counts once it has a sample, as CloudWatch's
// latest minute does.
class InFlightWindow {
 public:
  using Clock = std::chrono::steady_clock;
  explicit InFlightWindow(SignalOptions options) : options_(options) {}

  void add(Clock::time_point at, double in_flight);
  // The averages of the last `periods` periods that have samples, oldest first.
  std::vector<double> period_averages() const;
  // True once samples span `periods` whole periods.
  bool full(Clock::time_point now) const;
  std::size_t samples() const { return total_samples_; }

 private:
  struct Period {
    long index = 0;
    double sum = 0;
    long count = 0;
  };
  SignalOptions options_;
  Clock::time_point start_{};
  bool started_ = false;
  std::deque<Period> periods_;
  std::size_t total_samples_ = 0;
};

}  // namespace sluice::scale
