#pragma once
// The in-flight scaling signal of the pipeline's own queue, as `sluice run` serves it
// (the sluice_autoscale_* gauges and /autoscale): each reading of the queue's
// in-flight count goes into the window; the signal is computed from its period
// averages as `sluice autoscale` computes it.
#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/mutex.hpp"
#include "config/config.hpp"
#include "sluice/scale/in_flight.hpp"

namespace sluice::app {

class AutoscaleGauges;

// A reading of the queue the signal is computed from.
struct AutoscaleSample {
  double at_s = 0;  // since the first sample
  double in_flight = 0;
  double visible = -1;
};

// The JSON document (--output json, GET /autoscale): desired_tasks,
// utilization_percent, in_flight_max_average, running, spare, capacity, gated, gate,
// period_averages, samples.
nlohmann::json signal_document(const scale::Signal& signal,
                               const std::vector<AutoscaleSample>& samples);
std::string signal_json(const scale::Signal& signal, const std::vector<AutoscaleSample>& samples);

class AutoscaleSampler {
 public:
  AutoscaleSampler(const PipelineConfig& config, AutoscaleGauges& gauges);
  // One reading: messages ready (the backlog gate) and in flight. Any one thread.
  void sample(double ready, double in_flight, std::chrono::steady_clock::time_point now);
  // The latest signal as /autoscale's JSON document. Any thread.
  std::string document() const;

 private:
  scale::SignalOptions options_;
  long running_;
  AutoscaleGauges& gauges_;
  scale::InFlightWindow window_;
  mutable Mutex mutex_;
  std::string document_ SLUICE_GUARDED_BY(mutex_) = "{}";
};

}  // namespace sluice::app
