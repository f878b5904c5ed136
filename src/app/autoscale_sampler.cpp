#include "app/autoscale_sampler.hpp"

#include "app/autoscale.hpp"
#include "app/metrics.hpp"

namespace sluice::app {
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
