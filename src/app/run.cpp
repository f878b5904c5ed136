#include "app/run.hpp"

#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <atomic>
#include <iostream>
#include <mutex>
#include <unordered_set>

#include "app/admin.hpp"
#include "app/allocator.hpp"
#include "app/autoscale_sampler.hpp"
#include "app/drain_detector.hpp"
#include "app/http_endpoint.hpp"
#include "app/metrics.hpp"
#include "app/shutdown.hpp"
#include "runtime/thread_annotations.hpp"
#include "sinks/writer.hpp"
#include "sluice/container.hpp"

namespace sluice::app {
using Clock = std::chrono::steady_clock;

namespace {

double cpu_now() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

sinks::BatchWriter::SinkFactory sink_factory(const PipelineConfig& config) {
  switch (config.sink) {
    case SinkType::sqlite:
      return [o = config.sqlite] { return sinks::make_sqlite_sink(o); };
    case SinkType::postgres:
      return [o = config.postgres] { return sinks::make_postgres_sink(o); };
    case SinkType::mongodb:
      return [o = config.mongodb] { return sinks::make_mongo_sink(o); };
  }
  return nullptr;
}

// "skuId=SKU-1 locationId=LOC-7": the configured business fields, for log lines.
std::string log_context(const pipeline::Record& record, const std::vector<std::string>& fields) {
  std::string out;
  for (const auto& f : fields) {
    const auto* value = pipeline::find_field(record.document, f);
    if (!value) continue;
    out += (out.empty() ? "" : " ") + f + "=" +
           (value->is_string() ? value->get<std::string>() : value->dump());
  }
  return out;
}

// normalize.fields[].attribute and .header read Message::header.
std::optional<std::string_view> message_header(const void* message, std::string_view name) {
  return static_cast<const Message*>(message)->header(name);
}

// Messages whose latest write failed: a drained queue with some left (the queue's own
// redrive policy took them away) is not a success. Any writer thread; the common
// case, nothing unresolved and a record written, takes no lock.
class UnresolvedRecords {
 public:
  void record(sinks::WriteOutcome outcome, std::string_view message_id) {
    const bool failed = outcome == sinks::WriteOutcome::failed;
    if (!failed && !any_.load(std::memory_order_acquire)) return;
    std::lock_guard lock(mutex_);
    if (failed)
      ids_.emplace(message_id);
    else
      ids_.erase(std::string(message_id));
    any_.store(!ids_.empty(), std::memory_order_release);
  }
  std::size_t count() const {
    std::lock_guard lock(mutex_);
    return ids_.size();
  }

 private:
  mutable std::mutex mutex_;
  std::unordered_set<std::string> ids_ SLUICE_GUARDED_BY(mutex_);
  std::atomic<bool> any_{false};
};

// The admin endpoints' view of this pipeline (the metrics server's thread calls it
// while the main thread may let the container go: attach(nullptr) waits for a call).
class RunControl : public PipelineControl {
 public:
  RunControl(std::string name, PipelineMetrics& metrics, sinks::BatchWriter& writer)
      : name_(std::move(name)), metrics_(metrics), writer_(writer) {}
  void attach(Container* container) {
    std::lock_guard lock(mutex_);
    container_ = container;
  }
  const std::string& name() const override { return name_; }
  void pause() override {
    std::lock_guard lock(mutex_);
    if (container_) container_->pause();
    metrics_.set_paused("manual", true);
  }
  void resume() override {
    std::lock_guard lock(mutex_);
    if (container_) container_->resume();
    metrics_.set_paused("manual", false);
  }
  std::string state() const {
    std::lock_guard lock(mutex_);
    return state_locked();
  }
  nlohmann::json status() const override {
    std::lock_guard lock(mutex_);
    nlohmann::json s{{"pipeline", name_}, {"state", state_locked()}};
    if (container_) {
      const auto stats = container_->stats();
      s["in_flight"] = stats.in_flight;
      s["receivers"] = stats.concurrent_receives;
    }
    s["received"] = metrics_.received();
    s["written"] = metrics_.written();
    s["duplicates"] = metrics_.duplicates();
    s["filtered"] = metrics_.filtered();
    return s;
  }

 private:
  std::string state_locked() const {  // mutex_ held
    if (container_ && container_->paused()) return "paused";
    if (!writer_.healthy()) return "sink_unavailable";
    return "running";
  }
  std::string name_;
  PipelineMetrics& metrics_;
  sinks::BatchWriter& writer_;
  mutable std::mutex mutex_;
  Container* container_ SLUICE_GUARDED_BY(mutex_) = nullptr;
};

}  // namespace

int run_pipeline(const PipelineConfig& config, const RunOptions& options, RunSummary& summary) {
  const auto started = Clock::now();
  const double cpu_started = cpu_now();
  const driver::SourceDriver& source = *config.source_driver;
  auto metrics = std::make_shared<PipelineMetrics>(source.figures());
  const pipeline::Transformer transformer(config.transform);
  // The sizes sluice plan compares its recommendations with.
  metrics->set_setting("max_in_flight", config.container.max_in_flight);
  metrics->set_setting("min_concurrent_receives", config.container.min_concurrent_receives);
  metrics->set_setting("max_concurrent_receives", config.container.max_concurrent_receives);
  metrics->set_setting("worker_threads", config.container.worker_threads);
  metrics->set_setting("sink_writers", config.writer.writers);
  metrics->set_setting("sink_batch_size", static_cast<double>(config.writer.batch_size));
  metrics->set_setting("max_messages_per_second", config.container.max_messages_per_second);
  for (const auto& [name, value] : source.plan_settings(*config.source))
    metrics->set_setting(name, value);
  AutoscaleSampler autoscale(config, metrics->autoscale());

  sinks::WriterEvents events;
  events.batch_written = [&](std::size_t n, std::chrono::nanoseconds latency) {
    metrics->record_batch(n, latency);
  };
  UnresolvedRecords unresolved;
  events.outcome = [&](sinks::WriteOutcome o, const Message& message) {
    metrics->record_outcome(o);
    unresolved.record(o, message.id());
  };
  events.batch_failed = [&](const std::string&) { metrics->record_sink_failure(); };
  // Signals count from here: a SIGTERM during a slow start (a sink or a queue that
  // does not answer) stops it too, with exit code 0.
  const StopSignal stop_signal;
  sinks::BatchWriter writer(sink_factory(config), config.writer, events);
  try {
    writer.start();
  } catch (const std::exception& e) {
    spdlog::error("event=sink_unavailable error=\"{}\"", e.what());
    std::cerr << "sluice: cannot open the sink: " << e.what() << "\n";
    return 3;
  }
  if (stop_signal.requested()) {  // stopped while the sink was opening
    writer.stop();
    return 0;
  }
  summary.sink = config.sink == SinkType::sqlite ? "sqlite " + config.sqlite.path
                 : config.sink == SinkType::postgres
                     ? "postgres table " + config.postgres.table
                     : "mongodb " + config.mongodb.database + "." + config.mongodb.collection;

  const auto& log_fields = config.log_fields;
  auto handle_one = [&](Message& message) -> std::optional<sinks::BatchWriter::Item> {
    const auto meta = source.read_meta(message);
    pipeline::MessageView view;
    view.body = message.body();
    view.message_id = message.id();
    view.receive_count = message.receive_count();
    view.sent_time = meta.sent_time;
    view.received_time = message.received_at();
    view.source = message.source();
    view.group_id = meta.group_id;
    view.sequence_number = meta.sequence_number;
    view.deduplication_id = meta.deduplication_id;
    view.header = &message_header;
    view.header_context = &message;
    auto result = transformer.transform(view);
    if (std::holds_alternative<pipeline::Filtered>(result)) {
      metrics->record_filtered();
      spdlog::debug("event=filtered message_id={}", message.id());
      message.ack();
      return std::nullopt;
    }
    if (auto* record = std::get_if<pipeline::Record>(&result)) {
      if (!log_fields.empty()) {
        record->log_context = log_context(*record, log_fields);
        spdlog::debug("event=normalized message_id={} {} hash={}", message.id(),
                      record->log_context, record->hash);
      }
      return sinks::BatchWriter::Item{std::move(*record), message};
    }
    const auto& rejection = std::get<pipeline::Rejection>(result);
    const std::string reason = pipeline::to_string(rejection.reason);
    metrics->record_rejected(reason);
    spdlog::warn("event=rejected reason={} message_id={} receive_count={} detail=\"{}\"", reason,
                 message.id(), message.receive_count(), rejection.detail);
    return sinks::BatchWriter::Item{
        sinks::RejectRow{std::string(message.id()), reason, rejection.detail, message.body(),
                         message.source()},
        message};
  };

  // On a FIFO queue the container hands out a group's next message only once the
  // previous one is settled, and the writers settle a message only once its row is
  // committed: each group's rows reach the database in queue order.
  std::unique_ptr<Container> container;
  try {
    container = std::make_unique<Container>(config.container, source.factory(*config.source),
                                            BatchHandler([&](std::span<Message> batch) {
                                              std::vector<sinks::BatchWriter::Item> items;
                                              items.reserve(batch.size());
                                              for (auto& message : batch)
                                                if (auto item = handle_one(message))
                                                  items.push_back(std::move(*item));
                                              writer.submit_all(std::move(items));
                                            }));
  } catch (const std::exception& e) {
    std::cerr << "sluice: " << e.what() << "\n";
    writer.stop();
    return 2;
  }
  container->set_observer(metrics);
  RunControl control(config.name, *metrics, writer);
  control.attach(container.get());
  // A message whose S3 payload is missing (or can never fit): rejected like a
  // malformed one, its row in the rejects table first.
  container->set_unusable_handler(
      [&](Message& message, const std::string& reason, const std::string& detail) {
        metrics->record_rejected(reason);
        writer.submit_reject(sinks::RejectRow{std::string(message.id()), reason, detail,
                                              message.body(), message.source()},
                             message);
      });

  // The queue: checked at start, its counts read on a thread of their own (the
  // backlog gauge and the drained check).
  std::unique_ptr<driver::QueueProbe> watch;
  try {
    watch = source.probe(*config.source);
  } catch (const ConfigError& e) {
    std::cerr << "sluice: " << e.what() << "\n";
    writer.stop();
    return 2;
  }
  if (const int code =
          watch->check_at_start(config.wait_for_queue, [&] { return stop_signal.requested(); });
      code != 0) {
    writer.stop();
    if (code == 2) return 2;
    spdlog::info("event=signal_during_start signal={}", stop_signal.number());
    return 0;
  }
  driver::QueueCounts counts;
  watch->start(counts);
  auto stop_stats = [&] { watch->stop(); };

  std::unique_ptr<MetricsServer> server;
  std::atomic<bool> ready{false};
  if (!config.metrics_listen.empty()) {
    try {
      server = std::make_unique<MetricsServer>(
          config.metrics_listen, [&] { return metrics->serialize(); },
          [&] { return ready.load() && writer.healthy() && metrics->receiving(); },
          std::map<std::string, MetricsServer::Route>{
              {"/autoscale", {"application/json", [&] { return autoscale.document(); }}}},
          "metrics.listen (SLUICE_METRICS_LISTEN)",
          [&](MetricsServer::Exchange& x) {
            // /readyz says why while paused (503 either way).
            if (x.target == "/readyz" && ready.load() && control.state() != "running") {
              x.status = 503;
              x.body = control.state() + "\n";
              return true;
            }
            return config.admin_enabled && answer_admin(x, {&control}, config.admin_token);
          });
      spdlog::info("event=metrics_listening address={} port={}", config.metrics_listen,
                   server->port());
    } catch (const std::exception& e) {
      std::cerr << "sluice: " << e.what() << "\n";
      stop_stats();
      writer.stop();
      return 2;
    }
  }

  try {
    container->start();
  } catch (const std::exception& e) {  // the source could not be made: no region, bad endpoint
    std::cerr << "sluice: source: " << e.what() << "\n";
    stop_stats();
    writer.stop();
    return 2;
  }
  ready = true;
  spdlog::info(
      "event=pipeline_started pipeline={} queue={} sink={} identity={} filter_patterns={} "
      "max_messages_per_second={} admin={} allocator=\"{}\"",
      config.name, source.queue_name(*config.source), summary.sink, config.transform.hash_version,
      config.transform.filter.size(), config.container.max_messages_per_second,
      config.admin_enabled, allocator_in_use());
  bool sink_unavailable = false;
  DrainDetector drain(options.drained_for);
  auto work_ended = Clock::time_point{};
  std::int64_t counts_seen_ns = 0;
  // Samples the container and the queue's counts for the metrics, the autoscale
  // signal and the drain check, every 50 ms; a signal ends the wait at once.
  while (!stop_signal.wait_for(std::chrono::milliseconds(50))) {
    const auto stats = container->stats();
    metrics->update(stats);
    // The sink down: the pipeline holds what it has (no permits free, so no receives)
    // and keeps their leases; said on entry and exit.
    if (const bool down = !writer.healthy(); down != sink_unavailable) {
      sink_unavailable = down;
      metrics->set_paused("sink_unavailable", down);
      if (down)
        spdlog::warn("event=auto_pause pipeline={} reason=sink_unavailable held={}", config.name,
                     stats.in_flight);
      else
        spdlog::info("event=auto_resume pipeline={} reason=sink_available", config.name);
    }
    const std::int64_t read_at = counts.read_at_ns.load();
    if (read_at == counts_seen_ns) continue;  // no new reading of the queue
    counts_seen_ns = read_at;
    const long visible = counts.ready.load(), queue_in_flight = counts.in_flight.load();
    // A queue that does not report its unacknowledged count (RabbitMQ over AMQP): this
    // instance's own (held, plus waiting in the source) stands in for it.
    const double in_flight =
        queue_in_flight >= 0
            ? static_cast<double>(queue_in_flight)
            : static_cast<double>(stats.in_flight + metrics->source_unacknowledged());
    metrics->set_backlog(static_cast<double>(visible), in_flight);
    autoscale.sample(static_cast<double>(visible), in_flight, Clock::now());
    if (options.until_drained &&
        drain.observe({visible, queue_in_flight, stats.in_flight, stats.pending_acks,
                       metrics->source_unacknowledged(), writer.queued()},
                      Clock::now())) {
      spdlog::info("event=drained");
      work_ended = drain.idle_since();  // the idle wait is not work
      break;
    }
  }
  ready = false;
  if (stop_signal.requested()) spdlog::info("event=signal signal={}", stop_signal.number());
  // From here the whole stop, exit included, holds shutdown_deadline whatever the queue
  // and the database do: each step gets what is left of the steps' share, and a
  // watchdog ends the process at the deadline if a call still hangs (what was not acked
  // is delivered again later).
  ShutdownSupervisor supervisor(config.container.shutdown_deadline);
  const auto deadline = supervisor.steps_deadline();
  // Stop order: intake, running stages and pending writes (the container waits for
  // every started message to be settled by the writer), deletes flushed (the final
  // flush gets at least kFinalFlushMin, within the steps' share), the source destroyed
  // (a RabbitMQ connection that stopped answering costs up to 2 s) while the writers
  // finish, then the writers.
  stop_stats();
  control.attach(nullptr);
  container->stop(
      std::max(std::chrono::milliseconds(0), std::chrono::duration_cast<std::chrono::milliseconds>(
                                                 deadline - kFinalFlushMin - Clock::now())));
  container.reset();
  const bool writers_stopped = writer.stop(deadline, supervisor.interrupt_deadline());

  fill_from_metrics(summary, *metrics, source);
  summary.unresolved = unresolved.count();
  // The count is a courtesy: at most 2 s and never past the interrupt deadline.
  if (writers_stopped) {
    PipelineConfig quick = config;
    quick.postgres.query_timeout = std::chrono::seconds(1);
    quick.postgres.connect_timeout = std::chrono::seconds(1);
    const auto budget = std::min<Clock::duration>(std::chrono::seconds(2),
                                                  supervisor.interrupt_deadline() - Clock::now());
    if (auto records = count_records_within(sink_factory(quick), budget, summary.count_abandoned))
      summary.records_in_sink = *records;
  }
  if (work_ended == Clock::time_point{}) work_ended = Clock::now();
  summary.seconds = std::chrono::duration<double>(work_ended - started).count();
  summary.cpu_seconds = cpu_now() - cpu_started;
  supervisor.disarm();
  if (!options.quiet) print_summary(summary);
  if (!writers_stopped)  // a writer thread is stuck in a database call: cannot join it
    exit_now(5,
             "event=stop_deadline writers_abandoned=true (their records are not acked: they "
             "are delivered again)");
  // Drained, but some records were never written (their last write failed and the queue
  // no longer offers them, e.g. its redrive policy moved them): say so, for scripts.
  if (options.until_drained && !stop_signal.requested() && summary.unresolved > 0) {
    std::cerr << "sluice: drained, but " << summary.unresolved
              << " messages were never written (their last write failed; see the log lines "
                 "event=record_write_failed / sink_write_failed)\n";
    return 4;
  }
  return 0;
}

}  // namespace sluice::app
