#pragma once
// Prometheus metrics of a running pipeline: the container's observer, the sink's and
// the source's figures (observe/http_endpoint.hpp serves them).

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "sluice/container.hpp"
#include "sluice/driver/sink.hpp"
#include "sluice/driver/source_driver.hpp"
#include "sluice/scale/in_flight.hpp"
#include "sluice/tracing.hpp"

namespace sluice::app {

// The autoscale signal's gauges (sluice_autoscale_*): `sluice autoscale --serve` and
// `sluice run` export the same names.
class AutoscaleGauges {
 public:
  explicit AutoscaleGauges(prometheus::Registry& registry);
  void set(const scale::Signal& signal);

 private:
  prometheus::Gauge *desired_, *utilization_, *max_average_, *running_, *spare_, *capacity_,
      *gated_;
};

// The q-quantile of a Prometheus histogram, interpolated within its bucket as
// PromQL's histogram_quantile does.
double histogram_quantile(const prometheus::ClientMetric::Histogram& histogram, double q);

// The text exposition format, as Prometheus writes it: prometheus-cpp 1.0 writes a
// NaN sample as `Nan`, which promtool flags; this writes `NaN`.
std::string to_exposition_text(const std::vector<prometheus::MetricFamily>& families);

class PipelineMetrics;
// The exposition of several pipelines' metrics: one family per name, its series from
// each pipeline (told apart by their pipeline label).
// With the process's tracer's figures (sluice_trace_*), when it has one.
std::string serialize_all(const std::vector<const PipelineMetrics*>& pipelines,
                          const tracing::Tracer* tracer = nullptr);

class PipelineMetrics : public ContainerObserver {
 public:
  // `figures`: what the source reports (its driver's table), each made a metric.
  explicit PipelineMetrics(const std::vector<driver::SourceFigure>& figures = {});

  // ContainerObserver (called from the container's threads)
  void on_receive(std::size_t messages, std::chrono::nanoseconds latency) override;
  void on_receive_error(const std::string& what) override;
  void on_handler(std::chrono::nanoseconds latency, bool ok) override;
  void on_settled(const char* outcome) override;
  void on_concurrency(int receives) override;
  void on_source_gauge(const std::string& name, double value) override;
  // What the source holds unacknowledged beyond the container's in-flight messages
  // (its figures marked `held`: RabbitMQ's retries waiting out their backoff and acks
  // not yet sent); 0 for a source without such figures.
  std::int64_t source_unacknowledged() const;
  // False while the latest receive failed (queue gone, credentials refused, endpoint down).
  bool receiving() const { return receiving_.load(); }

  void record_outcome(sinks::WriteOutcome outcome);
  void record_rejected(const std::string& reason);
  void record_filtered() { filtered_->Increment(); }
  // sluice_paused{reason="manual" | "sink_unavailable"}: 1 while in force.
  void set_paused(const std::string& reason, bool paused);
  void record_batch(std::size_t size, std::chrono::nanoseconds latency);
  void record_sink_failure();
  void record_sink_open_failure();
  // The container's own figures: in flight, acks pending and abandoned, heartbeat.
  // From one thread (the main loop).
  void update(const ContainerStats& stats);
  void set_backlog(double visible, double not_visible);
  // sluice_dead_letter_backlog_messages: the dead-letter queue's messages; negative
  // (none known: no dead-letter queue, or its reading failed): no series. One thread.
  void set_dead_letter_backlog(double messages);
  // sluice_ready: 1 while /readyz would answer 200 for this pipeline.
  void set_ready(bool ready) { ready_->Set(ready ? 1 : 0); }
  // How long a message waited between its sending and its receipt; any thread.
  // sluice_oldest_message_age_seconds is the longest of the latest window (update()).
  void observe_message_age(std::chrono::system_clock::time_point sent,
                           std::chrono::system_clock::time_point received);
  // sluice_setting{name=...}: max_in_flight, sink_writers, ... (for sluice plan).
  void set_setting(const std::string& name, double value);
  AutoscaleGauges& autoscale() { return *autoscale_; }

  // Every family of the registry, each series labelled pipeline="NAME" (set_pipeline).
  std::vector<prometheus::MetricFamily> collect() const;
  std::string serialize() const;
  void set_pipeline(std::string name) { pipeline_ = std::move(name); }

  // Totals for summaries.
  std::uint64_t received() const { return static_cast<std::uint64_t>(received_->Value()); }
  std::uint64_t written() const { return static_cast<std::uint64_t>(written_->Value()); }
  std::uint64_t duplicates() const { return static_cast<std::uint64_t>(duplicates_->Value()); }
  std::uint64_t filtered() const { return static_cast<std::uint64_t>(filtered_->Value()); }
  std::uint64_t rejected(const std::string& reason) const;
  // A source's figure ("large_payloads_fetched", ...) as last reported; 0 when none.
  std::uint64_t source_total(const std::string& name) const;
  // The figures with a summary line, and their values (those not 0).
  std::vector<std::pair<std::string, std::uint64_t>> source_summary() const;
  std::uint64_t failed_writes() const { return static_cast<std::uint64_t>(write_failed_->Value()); }
  // From the first message received to the last one settled: the time spent working,
  // without start-up or the idle wait of --until-drained.
  double active_seconds() const;
  // Means of the histograms, for summaries.
  double mean_poll_latency_ms() const;
  double mean_sink_latency_ms() const;
  double mean_sink_batch() const;

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  std::string pipeline_ = "default";
  std::atomic<std::int64_t> first_receive_ns_{0};
  std::atomic<std::int64_t> last_settle_ns_{0};
  prometheus::Counter* received_;
  prometheus::Counter* receive_errors_;
  prometheus::Counter* empty_receives_;
  prometheus::Counter* written_;
  prometheus::Counter* duplicates_;
  prometheus::Counter* write_failed_;
  prometheus::Counter* sink_batch_failures_;
  prometheus::Counter* sink_open_failures_;
  prometheus::Counter* filtered_;
  prometheus::Family<prometheus::Gauge>* paused_;
  std::atomic<bool> receiving_{true};
  prometheus::Family<prometheus::Counter>* rejected_;
  prometheus::Family<prometheus::Counter>* settled_;
  std::mutex settled_mutex_;
  std::vector<std::pair<std::string, prometheus::Counter*>> settled_by_outcome_;
  prometheus::Gauge* in_flight_;
  prometheus::Gauge* receives_;
  // The source's figures, made at construction and fixed afterwards (read by any
  // thread without a lock); each keeps its latest value.
  struct Figure {
    driver::SourceFigure spec;
    prometheus::Gauge* gauge = nullptr;      // Kind::gauge
    prometheus::Counter* counter = nullptr;  // Kind::total
    std::atomic<double> last{0};
  };
  std::vector<std::unique_ptr<Figure>> figures_;
  std::map<std::string, Figure*, std::less<>> figures_by_name_;
  prometheus::Gauge* acks_pending_;
  prometheus::Counter* acks_abandoned_;
  prometheus::Counter* visibility_extensions_;
  std::uint64_t seen_failed_acks_ = 0, seen_extensions_ = 0;  // update()'s caller only
  prometheus::Gauge* lease_remaining_;
  prometheus::Gauge* backlog_visible_;
  prometheus::Gauge* backlog_in_flight_;
  prometheus::Family<prometheus::Gauge>* dead_letter_backlog_;
  prometheus::Gauge* dead_letter_gauge_ = nullptr;
  prometheus::Gauge* ready_;
  prometheus::Gauge* oldest_age_;
  std::atomic<std::int64_t> window_oldest_ms_{-1};  // -1: no message in the window yet
  std::chrono::steady_clock::time_point window_started_ = std::chrono::steady_clock::now();
  prometheus::Histogram* poll_latency_;
  prometheus::Histogram* handler_latency_;
  prometheus::Histogram* sink_latency_;
  prometheus::Histogram* sink_batch_size_;
  struct Quantile {
    prometheus::Histogram* histogram;
    double q;
    prometheus::Gauge* gauge;
  };
  std::vector<Quantile> quantiles_;
  prometheus::Family<prometheus::Gauge>* settings_;
  std::unique_ptr<AutoscaleGauges> autoscale_;
};

}  // namespace sluice::app
