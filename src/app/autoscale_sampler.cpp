#include "app/autoscale_sampler.hpp"

#include "observe/metrics.hpp"

namespace sluice::app {

nlohmann::json signal_document(const scale::Signal& signal,
                               const std::vector<AutoscaleSample>& samples) {
  nlohmann::json doc;
  doc["desired_tasks"] = signal.desired_tasks;
  doc["utilization_percent"] = signal.utilization_percent;
  doc["in_flight_max_average"] = signal.in_flight_max_average;
  doc["tasks_needed"] = signal.tasks_needed;
  doc["running"] = signal.running;
  doc["spare"] = signal.spare;
  doc["capacity"] = signal.capacity;
  doc["gated"] = signal.gated;
  doc["gate"] = signal.gate;
  doc["period_averages"] = signal.period_averages;
  auto& list = doc["samples"] = nlohmann::json::array();
  for (const auto& s : samples) {
    nlohmann::json sample{{"at_s", s.at_s}, {"in_flight", s.in_flight}};
    if (s.visible >= 0) sample["visible"] = s.visible;
    list.push_back(std::move(sample));
  }
  return doc;
}

std::string signal_json(const scale::Signal& signal, const std::vector<AutoscaleSample>& samples) {
  return signal_document(signal, samples).dump();
}

namespace {
scale::SignalOptions with_capacity(const PipelineConfig& config) {
  scale::SignalOptions options = config.autoscale;
  options.capacity =
      config.autoscale_capacity > 0 ? config.autoscale_capacity : config.container.max_in_flight;
  return options;
}
}  // namespace

AutoscaleSampler::AutoscaleSampler(const PipelineConfig& config, AutoscaleGauges& gauges)
    : options_(with_capacity(config)),
      running_(config.autoscale_running),
      gauges_(gauges),
      window_(options_) {}

void AutoscaleSampler::sample(double ready, double in_flight,
                              std::chrono::steady_clock::time_point now) {
  window_.add(now, in_flight);
  scale::GateInputs gates;
  gates.backlog = ready;
  const auto signal = scale::compute_signal(window_.period_averages(), running_, options_, gates);
  gauges_.set(signal);
  auto document = signal_json(signal, {});
  MutexLock lock(mutex_);
  document_ = std::move(document);
}

std::string AutoscaleSampler::document() const {
  MutexLock lock(mutex_);
  return document_;
}

}  // namespace sluice::app
