#include "observe/metrics.hpp"

#include <prometheus/text_serializer.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "ingest/reject_reasons.hpp"

namespace sluice::app {
using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;
using prometheus::Histogram;

namespace {
double seconds(std::chrono::nanoseconds d) {
  return std::chrono::duration<double>(d).count();
}
// From 10 us (a stage's work per message) to 25 s (a long poll, a stalled database).
const Histogram::BucketBoundaries kLatency{
    0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
    0.025,   0.05,     0.1,     0.25,   0.5,     1,      2.5,   5,      10,    25};
}  // namespace

PipelineMetrics::PipelineMetrics(const std::vector<driver::SourceFigure>& figures)
    : registry_(std::make_shared<prometheus::Registry>()) {
  auto& r = *registry_;
  received_ = &BuildCounter()
                   .Name("sluice_messages_received_total")
                   .Help("Messages received from the queue")
                   .Register(r)
                   .Add({});
  receive_errors_ = &BuildCounter()
                         .Name("sluice_receive_errors_total")
                         .Help("Failed receive calls")
                         .Register(r)
                         .Add({});
  empty_receives_ = &BuildCounter()
                         .Name("sluice_empty_receives_total")
                         .Help("Receives that returned nothing")
                         .Register(r)
                         .Add({});
  written_ = &BuildCounter()
                  .Name("sluice_records_written_total")
                  .Help("Records inserted by the sink")
                  .Register(r)
                  .Add({});
  duplicates_ = &BuildCounter()
                     .Name("sluice_records_duplicate_total")
                     .Help("Records already present (same content hash)")
                     .Register(r)
                     .Add({});
  write_failed_ = &BuildCounter()
                       .Name("sluice_records_failed_total")
                       .Help("Records the sink refused (nacked)")
                       .Register(r)
                       .Add({});
  sink_batch_failures_ = &BuildCounter()
                              .Name("sluice_sink_batch_failures_total")
                              .Help("Whole-batch write failures (database down, timeout)")
                              .Register(r)
                              .Add({});
  sink_open_failures_ = &BuildCounter()
                             .Name("sluice_sink_open_failures_total")
                             .Help(
                                 "Failed attempts to open the sink at start (a pipeline of "
                                 "several retries while the others run)")
                             .Register(r)
                             .Add({});
  filtered_ = &BuildCounter()
                   .Name("sluice_filtered_total")
                   .Help("Messages no filter pattern matched: acked, not written")
                   .Register(r)
                   .Add({});
  paused_ = &BuildGauge()
                 .Name("sluice_paused")
                 .Help(
                     "1 while receiving is paused: by hand (manual; sluice ctl) or while the "
                     "sink is unavailable (what is held is kept, leases extended)")
                 .Register(r);
  paused_->Add({{"reason", "manual"}});
  paused_->Add({{"reason", "sink_unavailable"}});
  rejected_ = &BuildCounter()
                   .Name("sluice_messages_rejected_total")
                   .Help("Messages rejected, by reason")
                   .Register(r);
  // Each known reason at 0 from the start: the first reject is a rate like the others.
  for (const auto& reason : ingest::kRejectReasons) rejected_->Add({{"reason", reason}});
  settled_ = &BuildCounter()
                  .Name("sluice_messages_settled_total")
                  .Help("Messages settled, by outcome")
                  .Register(r);
  in_flight_ = &BuildGauge()
                    .Name("sluice_messages_in_flight")
                    .Help("Messages held (received, not settled)")
                    .Register(r)
                    .Add({});
  acks_pending_ = &BuildGauge()
                       .Name("sluice_acks_pending")
                       .Help(
                           "Messages acked, delete not yet confirmed by the queue (they hold "
                           "permits)")
                       .Register(r)
                       .Add({});
  acks_abandoned_ = &BuildCounter()
                         .Name("sluice_acks_abandoned_total")
                         .Help("Deletes given up after retries (those messages come back)")
                         .Register(r)
                         .Add({});
  visibility_extensions_ = &BuildCounter()
                                .Name("sluice_visibility_extensions_total")
                                .Help("Leases extended by the heartbeat")
                                .Register(r)
                                .Add({});
  lease_remaining_ = &BuildGauge()
                          .Name("sluice_heartbeat_lease_remaining_min_seconds")
                          .Help(
                              "Least lease left on a held message at the latest heartbeat "
                              "round (towards 0: the heartbeat lags; negative: one ran out "
                              "before it was extended; NaN: nothing was due)")
                          .Register(r)
                          .Add({});
  for (const auto& spec : figures) {
    auto figure = std::make_unique<Figure>();
    figure->spec = spec;
    if (spec.kind == driver::SourceFigure::Kind::gauge)
      figure->gauge = &BuildGauge().Name("sluice_" + spec.name).Help(spec.help).Register(r).Add({});
    else
      figure->counter = &BuildCounter()
                             .Name("sluice_" + spec.name + "_total")
                             .Help(spec.help)
                             .Register(r)
                             .Add({});
    figures_by_name_[spec.name] = figure.get();
    figures_.push_back(std::move(figure));
  }
  receives_ = &BuildGauge()
                   .Name("sluice_concurrent_receives")
                   .Help("Receive loops running")
                   .Register(r)
                   .Add({});
  auto& backlog = BuildGauge()
                      .Name("sluice_queue_backlog_messages")
                      .Help("ApproximateNumberOfMessages(NotVisible) of the queue")
                      .Register(r);
  dead_letter_backlog_ = &BuildGauge()
                              .Name("sluice_dead_letter_backlog_messages")
                              .Help(
                                  "Messages in the pipeline's dead-letter queue (SQS: "
                                  "source.sqs.dead_letter_queue_url), read every 5 s")
                              .Register(r);
  ready_ = &BuildGauge()
                .Name("sluice_ready")
                .Help(
                    "1 while the pipeline is ready (/readyz 200): started, receiving, not "
                    "paused, its sink available")
                .Register(r)
                .Add({});
  oldest_age_ = &BuildGauge()
                     .Name("sluice_oldest_message_age_seconds")
                     .Help(
                         "The longest a message received in the latest 10 s had waited since "
                         "it was sent (0: none received)")
                     .Register(r)
                     .Add({});
  backlog_visible_ = &backlog.Add({{"state", "visible"}});
  backlog_in_flight_ = &backlog.Add({{"state", "not_visible"}});
  poll_latency_ = &BuildHistogram()
                       .Name("sluice_poll_latency_seconds")
                       .Help("ReceiveMessage latency")
                       .Register(r)
                       .Add({}, kLatency);
  handler_latency_ = &BuildHistogram()
                          .Name("sluice_stage_latency_seconds")
                          .Help("Decode, normalize and hash per message")
                          .Register(r)
                          .Add({}, kLatency);
  sink_latency_ = &BuildHistogram()
                       .Name("sluice_sink_write_latency_seconds")
                       .Help("One batch write")
                       .Register(r)
                       .Add({}, kLatency);
  sink_batch_size_ =
      &BuildHistogram()
           .Name("sluice_sink_batch_size")
           .Help("Records per batch write")
           .Register(r)
           .Add({}, Histogram::BucketBoundaries{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000});
  auto& quantiles = BuildGauge()
                        .Name("sluice_latency_quantile_seconds")
                        .Help(
                            "p50 and p99 since start (q=0.5, q=0.99: a gauge may not carry "
                            "Prometheus' quantile label), from the latency histograms (receive: "
                            "sluice_poll_latency_seconds, handler: sluice_stage_latency_seconds, "
                            "sink_batch: sluice_sink_write_latency_seconds)")
                        .Register(r);
  for (const auto& [stage, histogram] :
       {std::pair{"receive", poll_latency_}, std::pair{"handler", handler_latency_},
        std::pair{"sink_batch", sink_latency_}})
    for (double q : {0.5, 0.99})
      quantiles_.push_back(
          {histogram, q, &quantiles.Add({{"stage", stage}, {"q", q == 0.5 ? "0.5" : "0.99"}})});
  settings_ = &BuildGauge()
                   .Name("sluice_setting")
                   .Help("The running configuration's sizes (what sluice plan compares with)")
                   .Register(r);
  autoscale_ = std::make_unique<AutoscaleGauges>(r);
}

void PipelineMetrics::set_paused(const std::string& reason, bool paused) {
  paused_->Add({{"reason", reason}}).Set(paused ? 1 : 0);
}

void PipelineMetrics::set_setting(const std::string& name, double value) {
  settings_->Add({{"name", name}}).Set(value);
}

double histogram_quantile(const prometheus::ClientMetric::Histogram& h, double q) {
  if (h.sample_count == 0) return 0;
  const double rank = q * static_cast<double>(h.sample_count);
  double lower = 0, below = 0;
  for (const auto& bucket : h.bucket) {
    const double count = static_cast<double>(bucket.cumulative_count);
    if (count >= rank) {
      if (std::isinf(bucket.upper_bound)) return lower;  // beyond the last bound: its bound
      const double in_bucket = count - below;
      return in_bucket > 0 ? lower + (bucket.upper_bound - lower) * (rank - below) / in_bucket
                           : bucket.upper_bound;
    }
    lower = bucket.upper_bound;
    below = count;
  }
  return lower;
}

AutoscaleGauges::AutoscaleGauges(prometheus::Registry& r) {
  auto gauge = [&](const char* name, const char* help) {
    return &BuildGauge().Name(name).Help(help).Register(r).Add({});
  };
  desired_ =
      gauge("sluice_autoscale_desired_tasks", "ceil(in-flight max average / capacity + spare)");
  utilization_ = gauge("sluice_autoscale_task_utilization_percent",
                       "100 x (in-flight max average / capacity + spare) / running tasks");
  max_average_ = gauge("sluice_autoscale_in_flight_max_average",
                       "The largest of the last periods' average in-flight counts");
  running_ = gauge("sluice_autoscale_running_tasks", "Tasks running (given or read from ECS)");
  spare_ = gauge("sluice_autoscale_spare_tasks", "Spare tasks added to the desired count");
  capacity_ = gauge("sluice_autoscale_task_capacity", "Messages one task works on at once");
  gated_ = gauge("sluice_autoscale_gated", "1 while a gate holds scaling out");
}

void AutoscaleGauges::set(const scale::Signal& signal) {
  desired_->Set(static_cast<double>(signal.desired_tasks));
  utilization_->Set(signal.utilization_percent);
  max_average_->Set(signal.in_flight_max_average);
  running_->Set(static_cast<double>(signal.running));
  spare_->Set(signal.spare);
  capacity_->Set(signal.capacity);
  gated_->Set(signal.gated ? 1 : 0);
}

namespace {
std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

namespace {
double mean(prometheus::Histogram* h, double scale) {
  const auto m = h->Collect();
  return m.histogram.sample_count
             ? m.histogram.sample_sum / static_cast<double>(m.histogram.sample_count) * scale
             : 0.0;
}
}  // namespace

double PipelineMetrics::mean_poll_latency_ms() const {
  return mean(poll_latency_, 1000);
}
double PipelineMetrics::mean_sink_latency_ms() const {
  return mean(sink_latency_, 1000);
}
double PipelineMetrics::mean_sink_batch() const {
  return mean(sink_batch_size_, 1);
}

double PipelineMetrics::active_seconds() const {
  const auto first = first_receive_ns_.load(), last = last_settle_ns_.load();
  return first && last > first ? static_cast<double>(last - first) / 1e9 : 0.0;
}

void PipelineMetrics::update(const ContainerStats& stats) {
  // The oldest age of each window of 10 s (0 when none was received): alerts read its
  // max_over_time over a few minutes, so a scrape interval longer than the window
  // loses nothing that lasts.
  if (const auto now = std::chrono::steady_clock::now();
      now - window_started_ >= std::chrono::seconds(10)) {
    const auto oldest = window_oldest_ms_.exchange(-1, std::memory_order_relaxed);
    oldest_age_->Set(oldest < 0 ? 0.0 : static_cast<double>(oldest) / 1000.0);
    window_started_ = now;
  }
  in_flight_->Set(static_cast<double>(stats.in_flight));
  acks_pending_->Set(static_cast<double>(stats.pending_acks));
  // Counters from the container's totals: add what is new since the last update.
  acks_abandoned_->Increment(static_cast<double>(stats.failed_acks - seen_failed_acks_));
  visibility_extensions_->Increment(
      static_cast<double>(stats.visibility_extensions - seen_extensions_));
  seen_failed_acks_ = stats.failed_acks;
  seen_extensions_ = stats.visibility_extensions;
  // NaN while no held message is near its lease (no value to compare: no alert).
  lease_remaining_->Set(stats.lease_remaining_min_ms == kNoLeaseDue
                            ? std::numeric_limits<double>::quiet_NaN()
                            : static_cast<double>(stats.lease_remaining_min_ms) / 1000.0);
}

void PipelineMetrics::on_receive(std::size_t messages, std::chrono::nanoseconds latency) {
  receiving_ = true;
  poll_latency_->Observe(seconds(latency));
  if (messages > 0) {
    std::int64_t expected = 0;
    first_receive_ns_.compare_exchange_strong(expected, now_ns());
  }
  if (messages == 0) empty_receives_->Increment();
  received_->Increment(static_cast<double>(messages));
}
void PipelineMetrics::on_receive_error(const std::string&) {
  receiving_ = false;
  receive_errors_->Increment();
}
void PipelineMetrics::on_handler(std::chrono::nanoseconds latency, bool) {
  handler_latency_->Observe(seconds(latency));
}
void PipelineMetrics::on_settled(const char* outcome) {
  prometheus::Counter* counter = nullptr;
  {
    // Family::Add builds a label map per call; outcomes are a handful of literals.
    std::lock_guard lock(settled_mutex_);
    for (const auto& [name, known] : settled_by_outcome_)
      if (name == outcome) counter = known;
    if (!counter) {
      counter = &settled_->Add({{"outcome", outcome}});
      settled_by_outcome_.emplace_back(outcome, counter);
    }
  }
  counter->Increment();
  last_settle_ns_.store(now_ns(), std::memory_order_relaxed);
}
void PipelineMetrics::on_concurrency(int receives) {
  receives_->Set(receives);
}
std::uint64_t PipelineMetrics::source_total(const std::string& name) const {
  auto it = figures_by_name_.find(name);
  return it == figures_by_name_.end() ? 0 : static_cast<std::uint64_t>(it->second->last.load());
}

std::vector<std::pair<std::string, std::uint64_t>> PipelineMetrics::source_summary() const {
  std::vector<std::pair<std::string, std::uint64_t>> lines;
  for (const auto& f : figures_)
    if (!f->spec.summary.empty() && f->last.load() > 0)
      lines.emplace_back(f->spec.summary, static_cast<std::uint64_t>(f->last.load()));
  return lines;
}

std::int64_t PipelineMetrics::source_unacknowledged() const {
  double held = 0;
  for (const auto& f : figures_)
    if (f->spec.held) held += f->last.load(std::memory_order_relaxed);
  return static_cast<std::int64_t>(held);
}

void PipelineMetrics::on_source_gauge(const std::string& name, double value) {
  auto it = figures_by_name_.find(name);
  if (it == figures_by_name_.end()) return;  // a figure its driver does not declare
  Figure& f = *it->second;
  if (f.gauge) {
    f.last.store(value, std::memory_order_relaxed);
    f.gauge->Set(value);
    return;
  }
  // Totals arrive as running values from any thread: the counter advances by what
  // this report adds beyond the largest seen, claimed atomically (two reports never
  // both count the same difference).
  double seen = f.last.load();
  while (value > seen)
    if (f.last.compare_exchange_weak(seen, value)) {
      f.counter->Increment(value - seen);
      break;
    }
}

void PipelineMetrics::record_outcome(sinks::WriteOutcome outcome) {
  switch (outcome) {
    case sinks::WriteOutcome::inserted:
      written_->Increment();
      break;
    case sinks::WriteOutcome::duplicate:
      duplicates_->Increment();
      break;
    case sinks::WriteOutcome::failed:
      write_failed_->Increment();
      break;
    case sinks::WriteOutcome::refused:
      record_rejected("sink_refused");
      break;
  }
}
void PipelineMetrics::record_rejected(const std::string& reason) {
  rejected_->Add({{"reason", reason}}).Increment();
}
void PipelineMetrics::record_batch(std::size_t size, std::chrono::nanoseconds latency) {
  sink_batch_size_->Observe(static_cast<double>(size));
  sink_latency_->Observe(seconds(latency));
}
void PipelineMetrics::record_sink_failure() {
  sink_batch_failures_->Increment();
}
void PipelineMetrics::record_sink_open_failure() {
  sink_open_failures_->Increment();
}
void PipelineMetrics::set_dead_letter_backlog(double messages) {
  if (messages < 0) {
    if (dead_letter_gauge_) dead_letter_backlog_->Remove(dead_letter_gauge_);
    dead_letter_gauge_ = nullptr;
    return;
  }
  if (!dead_letter_gauge_) dead_letter_gauge_ = &dead_letter_backlog_->Add({});
  dead_letter_gauge_->Set(messages);
}

void PipelineMetrics::observe_message_age(std::chrono::system_clock::time_point sent,
                                          std::chrono::system_clock::time_point received) {
  const auto age = std::max<std::int64_t>(
      0, std::chrono::duration_cast<std::chrono::milliseconds>(received - sent).count());
  auto seen = window_oldest_ms_.load(std::memory_order_relaxed);
  while (age > seen &&
         !window_oldest_ms_.compare_exchange_weak(seen, age, std::memory_order_relaxed)) {
  }
}

void PipelineMetrics::set_backlog(double visible, double not_visible) {
  backlog_visible_->Set(visible);
  backlog_in_flight_->Set(not_visible);
}
std::uint64_t PipelineMetrics::rejected(const std::string& reason) const {
  return static_cast<std::uint64_t>(rejected_->Add({{"reason", reason}}).Value());
}
std::vector<prometheus::MetricFamily> PipelineMetrics::collect() const {
  for (const auto& q : quantiles_)
    q.gauge->Set(histogram_quantile(q.histogram->Collect().histogram, q.q));
  auto families = registry_->Collect();
  for (auto& family : families)
    for (auto& metric : family.metric) {
      metric.label.push_back({"pipeline", pipeline_});
      std::sort(metric.label.begin(), metric.label.end(),
                [](const auto& a, const auto& b) { return a.name < b.name; });
    }
  return families;
}

std::string to_exposition_text(const std::vector<prometheus::MetricFamily>& families) {
  std::string text = prometheus::TextSerializer().Serialize(families);
  // A sample line ends in its value (no timestamps are written); label values and help
  // texts escape their newlines, so " Nan\n" at the end of a sample line is a value.
  static constexpr std::string_view kWritten = " Nan\n";
  for (std::size_t at = text.find(kWritten); at != std::string::npos;
       at = text.find(kWritten, at + kWritten.size())) {
    const std::size_t line_start = text.rfind('\n', at);
    const std::size_t first = line_start == std::string::npos ? 0 : line_start + 1;
    if (text[first] != '#') text.replace(at + 1, 3, "NaN");
  }
  return text;
}

std::string PipelineMetrics::serialize() const {
  return to_exposition_text(collect());
}

namespace {
prometheus::MetricFamily counter_family(std::string name, std::string help, std::uint64_t value) {
  prometheus::MetricFamily family;
  family.name = std::move(name);
  family.help = std::move(help);
  family.type = prometheus::MetricType::Counter;
  prometheus::ClientMetric metric;
  metric.counter.value = static_cast<double>(value);
  family.metric.push_back(std::move(metric));
  return family;
}
}  // namespace

std::string serialize_all(const std::vector<const PipelineMetrics*>& pipelines,
                          const tracing::Tracer* tracer) {
  std::vector<prometheus::MetricFamily> merged;
  std::map<std::string, std::size_t> index;
  for (const auto* p : pipelines)
    for (auto& family : p->collect()) {
      const auto [it, fresh] = index.emplace(family.name, merged.size());
      if (fresh) {
        merged.push_back(std::move(family));
      } else {
        auto& into = merged[it->second].metric;
        into.insert(into.end(), std::make_move_iterator(family.metric.begin()),
                    std::make_move_iterator(family.metric.end()));
      }
    }
  if (tracer) {
    const auto s = tracer->stats();
    merged.push_back(counter_family("sluice_trace_spans_started_total",
                                    "Sampled spans made (receive, process, batch write).",
                                    s.spans_started));
    merged.push_back(counter_family("sluice_trace_spans_exported_total",
                                    "Spans the collector accepted.", s.spans_exported));
    merged.push_back(counter_family(
        "sluice_trace_spans_dropped_total",
        "Spans dropped: the export queue was full, or the collector failed or refused them.",
        s.spans_dropped));
    merged.push_back(counter_family("sluice_trace_export_requests_total",
                                    "OTLP/HTTP export requests sent.", s.export_requests));
    merged.push_back(counter_family("sluice_trace_export_failures_total",
                                    "Export requests that failed (no answer, or not 2xx).",
                                    s.export_failures));
  }
  return to_exposition_text(merged);
}

}  // namespace sluice::app
