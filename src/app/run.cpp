#include "app/run.hpp"

#include <spdlog/spdlog.h>

#include <atomic>
#include <condition_variable>
#include <iostream>
#include <mutex>
#include <thread>

#include "app/allocator.hpp"
#include "app/autoscale_sampler.hpp"
#include "app/drain_detector.hpp"
#include "app/run_control.hpp"
#include "app/shutdown.hpp"
#include "common/mutex.hpp"
#include "common/redact.hpp"
#include "common/thread_name.hpp"
#include "ingest/record_stage.hpp"
#include "observe/admin.hpp"
#include "observe/http_endpoint.hpp"
#include "observe/metrics.hpp"
#include "sinks/positions.hpp"
#include "sinks/writer.hpp"
#include "sluice/container.hpp"

namespace sluice::app {
using Clock = std::chrono::steady_clock;

sinks::BatchWriter::SinkFactory sink_factory(const PipelineConfig& config) {
  return config.sink_driver->factory(*config.sink);
}

namespace {

// One pipeline of the process: its writers, its container, its queue's probe and its
// metrics. The process (run_pipelines) opens, samples and stops every one.
class PipelineRun {
 public:
  PipelineRun(const PipelineConfig& config, std::chrono::milliseconds drained_for,
              std::shared_ptr<tracing::Tracer> tracer)
      : config_(config),
        tracer_(std::move(tracer)),
        source_(*config.source_driver),
        metrics_(std::make_shared<PipelineMetrics>(source_.figures())),
        stage_(config.name, config.transform, source_, config.log_fields, stage_events()),
        autoscale_(config, metrics_->autoscale()),
        control_(config.name, *metrics_, writer()),
        drain_(drained_for) {
    metrics_->set_pipeline(config.name);
    // The sizes sluice plan compares its recommendations with.
    metrics_->set_setting("max_in_flight", config.container.max_in_flight);
    metrics_->set_setting("min_concurrent_receives", config.container.min_concurrent_receives);
    metrics_->set_setting("max_concurrent_receives", config.container.max_concurrent_receives);
    metrics_->set_setting("auto_concurrency", config.container.auto_concurrency ? 1 : 0);
    metrics_->set_setting("worker_threads", config.container.worker_threads);
    metrics_->set_setting("sink_writers", config.writer.writers);
    metrics_->set_setting("sink_batch_size", static_cast<double>(config.writer.batch_size));
    metrics_->set_setting("max_messages_per_second", config.container.max_messages_per_second);
    for (const auto& [name, value] : source_.plan_settings(*config.source))
      metrics_->set_setting(name, value);
    summary_.name = config.name;
    summary_.sink = config.sink_driver->describe(*config.sink);
  }
  ~PipelineRun() {
    cancel_opening();
    control_.attach(nullptr);
  }

  const PipelineConfig& config() const { return config_; }
  PipelineMetrics& metrics() { return *metrics_; }
  RunControl& control() { return control_; }
  AutoscaleSampler& autoscale() { return autoscale_; }
  bool ready() const { return ready_.load() && writer_->healthy() && metrics_->receiving(); }

  // The sink, the container and the queue's check at start: 0, or the exit code
  // (0 too when a signal came while starting: `stopped` says so). 3: the sink could
  // not be opened; printed, unless `sink_error` takes the reason (a retry will follow).
  int open(const StopSignal& stop_signal, bool& stopped, std::string* sink_error = nullptr) {
    try {
      writer_->start();
    } catch (const std::exception& e) {
      if (sink_error) {
        *sink_error = e.what();
        return 3;
      }
      spdlog::error("event=sink_unavailable pipeline={} error=\"{}\"", config_.name, e.what());
      std::cerr << "sluice: " << prefix() << "cannot open the sink: " << e.what() << "\n";
      return 3;
    }
    writer_open_ = true;
    if (stop_signal.requested()) {  // stopped while the sink was opening
      stopped = true;
      return 0;
    }
    // On a FIFO queue the container hands out a group's next run (its messages received
    // together) only once the previous run is settled; the writers write a group's
    // records in the order handed over, one writer at a time, and none after one that
    // failed: each group's rows reach the database in queue order.
    try {
      container_ = std::make_unique<Container>(config_.container, source_.factory(*config_.source),
                                               BatchHandler([this](std::span<Message> batch) {
                                                 writer_->submit_all(stage_.handle(batch));
                                               }));
    } catch (const std::exception& e) {
      std::cerr << "sluice: " << prefix() << e.what() << "\n";
      return 2;
    }
    container_->set_observer(metrics_);
    if (tracer_) container_->set_tracer(tracer_);
    // A source reading a log (a RabbitMQ stream) keeps its position beside the records.
    container_->set_position_store(sinks::make_position_store(sink_factory(config_)));
    control_.attach(container_.get());
    // A message whose S3 payload is missing (or can never fit): rejected like a
    // malformed one, its row in the rejects table first.
    container_->set_unusable_handler(
        [this](Message& message, const std::string& reason, const std::string& detail) {
          auto item = stage_.unusable(message, reason, detail);
          writer_->submit_reject(std::get<sinks::RejectRow>(std::move(item.payload)),
                                 std::move(item.message));
        });
    // The queue: checked at start, its counts read on a thread of their own (the
    // backlog gauge and the drained check).
    try {
      watch_ = source_.probe(*config_.source);
    } catch (const ConfigError& e) {
      std::cerr << "sluice: " << prefix() << e.what() << "\n";
      return 2;
    }
    if (const int code =
            watch_->check_at_start(config_.wait_for_queue, [&] { return stop_signal.requested(); });
        code != 0) {
      if (code == 2) return 2;
      stopped = true;
      return 0;
    }
    watch_->start(counts_);
    watching_ = true;
    return 0;
  }

  int start() {
    try {
      container_->start();
    } catch (const std::exception& e) {  // the source could not be made: no region, bad endpoint
      std::cerr << "sluice: " << prefix() << "source: " << e.what() << "\n";
      return 2;
    }
    control_.set_start_state({});
    ready_ = true;
    started_.store(true, std::memory_order_release);
    spdlog::info(
        "event=pipeline_started pipeline={} queue={} sink={} identity={} filter_patterns={} "
        "max_messages_per_second={} admin={} allocator=\"{}\"",
        config_.name, source_.queue_name(*config_.source), summary_.sink,
        config_.transform.hash_version, config_.transform.filter.size(),
        config_.container.max_messages_per_second, config_.admin_enabled, allocator_in_use());
    return 0;
  }

  // One of several pipelines: opened and started on a thread of its own, so that one
  // whose sink does not answer retries with backoff (1 s doubling to 30 s) while the
  // others run. Meanwhile it is not ready: sluice_paused{reason="sink_unavailable"},
  // sluice_sink_open_failures_total, a warning per attempt and `sluice ctl status`
  // (state sink_unavailable, the error) say why. Any other failure to start is the
  // process's (failed() gives its exit code): a missing queue is not a transient.
  void open_in_background(const StopSignal& stop_signal, int index) {
    opener_ = std::thread([this, &stop_signal, index] {
      common::name_this_thread("sluice-open", index);
      auto backoff = std::chrono::milliseconds(1000);
      for (int attempt = 1;; ++attempt) {
        bool stopped = false;
        std::string sink_error;
        int code = open(stop_signal, stopped, &sink_error);
        if (code == 3) {
          // An attempt cut short by the stop is not the reason the pipeline never
          // started: the one before it is (or, when it was the first, this one).
          MutexLock lock(opening_mutex_);
          if (!opening_cancelled_ || open_failures_ == 0) {
            open_failures_ = attempt;
            last_open_error_ = sink_error;
          }
        }
        if (stopped || opening_cancelled()) return;
        if (code == 0 && attempt > 1) {  // before start(): sample() owns the gauge after
          metrics_->set_paused("sink_unavailable", false);
          spdlog::info("event=sink_opened pipeline={} attempts={}", config_.name, attempt);
        }
        if (code == 0) code = start();
        if (code != 3) {
          failed_.store(code);
          return;
        }
        metrics_->record_sink_open_failure();
        metrics_->set_paused("sink_unavailable", true);
        control_.set_start_state("sink_unavailable", sink_error);
        spdlog::warn(
            "event=sink_open_failed pipeline={} attempt={} retry_in_ms={} error=\"{}\" (the "
            "other pipelines run; this one starts once its sink answers)",
            config_.name, attempt, backoff.count(), sink_error);
        UniqueMutexLock lock(opening_mutex_);
        const auto retry_at = Clock::now() + backoff;
        while (!opening_cancelled_ &&
               opening_cv_.wait_until(lock.native(), retry_at) == std::cv_status::no_timeout) {
        }
        if (opening_cancelled_) return;
        backoff = std::min(backoff * 2, std::chrono::milliseconds(30000));
      }
    });
  }
  bool started() const { return started_.load(std::memory_order_acquire); }
  // Not started, and its sink has failed to open at least once.
  bool open_failed() {
    MutexLock lock(opening_mutex_);
    return !started() && open_failures_ > 0;
  }
  int failed() const { return failed_.load(); }

  // The container's figures and the queue's latest counts, every 50 ms: the metrics,
  // the autoscale signal and the drain check. True while drained (--until-drained):
  // not a latch, as a pipeline drained early may get more work while the others finish.
  bool sample(const RunOptions& options) {
    const auto stats = container_->stats();
    metrics_->update(stats);
    metrics_->set_ready(ready() && control_.state() == "running");
    // The sink down: the pipeline holds what it has (no permits free, so no receives)
    // and keeps their leases; said on entry and exit.
    if (const bool down = !writer_->healthy(); down != sink_unavailable_) {
      sink_unavailable_ = down;
      metrics_->set_paused("sink_unavailable", down);
      if (down)
        spdlog::warn("event=auto_pause pipeline={} reason=sink_unavailable held={}", config_.name,
                     stats.in_flight);
      else
        spdlog::info("event=auto_resume pipeline={} reason=sink_available", config_.name);
    }
    const std::int64_t read_at = counts_.read_at_ns.load();
    if (read_at == counts_seen_ns_) return drained_;  // no new reading of the queue
    counts_seen_ns_ = read_at;
    const long visible = counts_.ready.load(), queue_in_flight = counts_.in_flight.load();
    // A queue that does not report its unacknowledged count (RabbitMQ over AMQP): this
    // instance's own (held, plus waiting in the source) stands in for it.
    const double in_flight =
        queue_in_flight >= 0
            ? static_cast<double>(queue_in_flight)
            : static_cast<double>(stats.in_flight + metrics_->source_unacknowledged());
    metrics_->set_backlog(static_cast<double>(visible), in_flight);
    metrics_->set_dead_letter_backlog(static_cast<double>(counts_.dead_letters.load()));
    autoscale_.sample(static_cast<double>(visible), in_flight, Clock::now());
    const bool drained =
        options.until_drained && !stats.paused &&
        drain_.observe({visible, queue_in_flight, stats.in_flight, stats.pending_acks,
                        metrics_->source_unacknowledged(), writer_->queued()},
                       Clock::now());
    if (drained && !drained_) {
      spdlog::info("event=drained pipeline={}", config_.name);
      work_ended_ = drain_.idle_since();  // the idle wait is not work
    }
    drained_ = drained;
    return drained_;
  }

  // Stop order: intake, running stages and pending writes (the container waits for
  // every started message to be settled by the writer), deletes flushed (the final
  // flush gets at least kFinalFlushMin, within the steps' share), the source destroyed
  // (a RabbitMQ connection that stopped answering costs up to 2 s) while the writers
  // finish, then the writers.
  void stop_container(Clock::time_point deadline) {
    cancel_opening();
    ready_ = false;
    metrics_->set_ready(false);
    if (watching_) watch_->stop();
    watching_ = false;
    control_.attach(nullptr);
    if (container_)
      container_->stop(std::max(std::chrono::milliseconds(0),
                                std::chrono::duration_cast<std::chrono::milliseconds>(
                                    deadline - kFinalFlushMin - Clock::now())));
    container_.reset();
  }
  // False when a writer is still stuck in a database call at `give_up`.
  bool stop_writers(Clock::time_point deadline, Clock::time_point give_up) {
    if (!writer_open_) return true;
    writer_open_ = false;
    return writer_->stop(deadline, give_up);
  }

  RunSummary& summarize(bool writers_stopped, Clock::time_point interrupt_deadline,
                        Clock::time_point run_began) {
    fill_from_metrics(summary_, *metrics_, source_);
    summary_.unresolved = unresolved_.count();
    if (!started()) {
      MutexLock lock(opening_mutex_);
      summary_.never_started = open_failures_ > 0
                                   ? "its sink did not open in " + std::to_string(open_failures_) +
                                         " attempts: " + last_open_error_
                                   : "stopped while its sink was being opened";
    }
    // The count is a courtesy: at most 2 s and never past the interrupt deadline (none
    // for a sink that never opened).
    if (writers_stopped && summary_.never_started.empty()) {
      const auto budget =
          std::min<Clock::duration>(std::chrono::seconds(2), interrupt_deadline - Clock::now());
      const auto quick = config_.sink_driver->quick_factory(
          *config_.sink, std::chrono::duration_cast<std::chrono::milliseconds>(budget) / 2);
      if (auto records = count_records_within(quick, budget, summary_.count_abandoned))
        summary_.records_in_sink = *records;
    }
    const auto ended = work_ended_ == Clock::time_point{} ? Clock::now() : work_ended_;
    summary_.seconds = std::chrono::duration<double>(ended - run_began).count();
    return summary_;
  }

 private:
  std::string prefix() const { return "pipeline " + config_.name + ": "; }

  bool opening_cancelled() {
    MutexLock lock(opening_mutex_);
    return opening_cancelled_;
  }
  // Ends the retries and waits for the attempt under way, interrupted (PostgreSQL's
  // connect returns within a poll slice; MongoDB's within its server selection timeout;
  // the stop's watchdog holds the deadline regardless).
  void cancel_opening() {
    {
      MutexLock lock(opening_mutex_);
      opening_cancelled_ = true;
    }
    opening_cv_.notify_all();
    if (opener_.joinable()) {
      writer_->interrupt_start();
      opener_.join();
    }
  }

  sinks::BatchWriter& writer() {
    sinks::WriterEvents events;
    events.batch_written = [this](std::size_t n, std::chrono::nanoseconds latency) {
      metrics_->record_batch(n, latency);
    };
    events.outcome = [this](sinks::WriteOutcome o, const Message& message) {
      metrics_->record_outcome(o);
      unresolved_.record(o, message.id());
    };
    events.batch_failed = [this](const std::string&) { metrics_->record_sink_failure(); };
    events.properties = [this](const Message& message) { return stage_.properties(message); };
    auto options = config_.writer;
    options.pipeline = config_.name;
    if (tracer_) {
      options.tracer = tracer_;
      options.db_system = config_.sink_driver->db_system();
      options.db_collection = config_.sink_table;
    }
    writer_ = std::make_unique<sinks::BatchWriter>(sink_factory(config_), options, events);
    return *writer_;
  }

  ingest::StageEvents stage_events() {
    ingest::StageEvents events;
    events.message_age = [this](auto sent, auto received) {
      metrics_->observe_message_age(sent, received);
    };
    events.filtered = [this] { metrics_->record_filtered(); };
    events.rejected = [this](const std::string& reason) { metrics_->record_rejected(reason); };
    return events;
  }

  const PipelineConfig& config_;
  std::shared_ptr<tracing::Tracer> tracer_;  // the process's, or null
  const driver::SourceDriver& source_;
  std::shared_ptr<PipelineMetrics> metrics_;
  const ingest::RecordStage stage_;
  AutoscaleSampler autoscale_;
  UnresolvedRecords unresolved_;
  std::unique_ptr<sinks::BatchWriter> writer_;  // made by writer(), for control_
  RunControl control_;
  bool writer_open_ = false;
  std::unique_ptr<Container> container_;
  std::unique_ptr<driver::QueueProbe> watch_;
  bool watching_ = false;
  driver::QueueCounts counts_;
  std::int64_t counts_seen_ns_ = 0;
  std::atomic<bool> ready_{false};
  std::atomic<bool> started_{false};  // the container runs: the main loop samples it
  std::atomic<int> failed_{0};        // an exit code from the opener thread
  std::thread opener_;
  Mutex opening_mutex_;
  std::condition_variable opening_cv_;
  bool opening_cancelled_ SLUICE_GUARDED_BY(opening_mutex_) = false;
  int open_failures_ SLUICE_GUARDED_BY(opening_mutex_) = 0;
  std::string last_open_error_ SLUICE_GUARDED_BY(opening_mutex_);
  bool sink_unavailable_ = false;
  DrainDetector drain_;
  bool drained_ = false;
  Clock::time_point work_ended_{};
  RunSummary summary_;
};

}  // namespace

int run_pipelines(const std::vector<PipelineConfig>& configs, const RunOptions& options,
                  std::vector<RunSummary>& summaries) {
  const auto started = Clock::now();
  const double cpu_started = process_cpu_seconds();
  // Signals count from here: a SIGTERM during a slow start (a sink or a queue that
  // does not answer) stops it too, with exit code 0.
  const StopSignal stop_signal;
  const auto& first = configs.front();  // the process's keys (metrics, admin) are everyone's
  // One exporter for every pipeline; its last spans get a second at the end.
  std::shared_ptr<tracing::Tracer> tracer;
  if (!first.tracer.otlp_endpoint.empty()) {
    tracer = tracing::Tracer::make(first.tracer);
    spdlog::info("event=tracing endpoint={} sampling_ratio={} producer_as_parent={}",
                 common::redact_password(first.tracer.otlp_endpoint), first.tracer.sampling_ratio,
                 first.tracer.producer_as_parent);
  }
  struct TracerFlush {
    std::shared_ptr<tracing::Tracer> tracer;
    ~TracerFlush() {
      if (tracer) tracer->shutdown(std::chrono::seconds(1));
    }
  } tracer_flush{tracer};
  std::vector<std::unique_ptr<PipelineRun>> runs;
  for (const auto& config : configs) {
    runs.push_back(std::make_unique<PipelineRun>(config, options.drained_for, tracer));
  }
  // Stops what was opened, in the same order as a full stop.
  auto abandon = [&](int code) {
    const auto deadline = Clock::now() + first.container.shutdown_deadline;
    for (auto& run : runs) run->stop_container(deadline);
    for (auto& run : runs) run->stop_writers(deadline, deadline + std::chrono::seconds(5));
    return code;
  };
  // One pipeline opens here and exits if it cannot (3: the sink did not answer; its
  // orchestrator restarts it); several open on threads of their own once the metrics
  // server is up, each retrying its sink on its own while the others run.
  const bool one_pipeline = runs.size() == 1;
  if (one_pipeline) {
    bool stopped = false;
    if (const int code = runs.front()->open(stop_signal, stopped); code != 0) return abandon(code);
    if (stopped) {
      spdlog::info("event=signal_during_start signal={}", stop_signal.number());
      return abandon(0);
    }
  }

  std::vector<PipelineControl*> controls;
  std::vector<const PipelineMetrics*> all_metrics;
  for (auto& run : runs) {
    controls.push_back(&run->control());
    all_metrics.push_back(&run->metrics());
  }
  std::unique_ptr<MetricsServer> server;
  if (!first.metrics_listen.empty()) {
    try {
      server = std::make_unique<MetricsServer>(
          first.metrics_listen, [&] { return serialize_all(all_metrics, tracer.get()); },
          [&] {
            return std::all_of(runs.begin(), runs.end(), [](const auto& r) { return r->ready(); });
          },
          std::map<std::string, MetricsServer::Route>{
              {"/autoscale",
               {"application/json",
                [&] {
                  if (runs.size() == 1) return runs.front()->autoscale().document();
                  nlohmann::json all = nlohmann::json::object();
                  for (auto& run : runs)
                    all[run->config().name] =
                        nlohmann::json::parse(run->autoscale().document(), nullptr, false);
                  return all.dump();
                }}}},
          "metrics.listen (SLUICE_METRICS_LISTEN)",
          [&](MetricsServer::Exchange& x) {
            // /readyz says why while a pipeline is paused (503 either way).
            if (x.target == "/readyz") {
              std::string why;
              for (auto& run : runs)
                if (const auto state = run->control().state(); state != "running")
                  why += (runs.size() > 1 ? run->config().name + " " : "") + state + "\n";
              if (!why.empty()) {
                x.status = 503;
                x.body = why;
                return true;
              }
              return false;
            }
            return first.admin_enabled && answer_admin(x, controls, first.admin_token);
          });
      spdlog::info("event=metrics_listening address={} port={}", first.metrics_listen,
                   server->port());
    } catch (const std::exception& e) {
      std::cerr << "sluice: " << e.what() << "\n";
      return abandon(2);
    }
  }

  if (one_pipeline) {
    if (const int code = runs.front()->start(); code != 0) return abandon(code);
  } else {
    for (std::size_t i = 0; i < runs.size(); ++i)
      runs[i]->open_in_background(stop_signal, static_cast<int>(i + 1));
  }

  // Samples every pipeline every 50 ms; a signal ends the wait at once. With
  // --until-drained the run ends once every started pipeline is drained and every other
  // one has failed to open its sink (exit 3 below): a batch job does not wait forever
  // for a database that does not answer.
  bool never_opened = false;
  while (!stop_signal.wait_for(std::chrono::milliseconds(50))) {
    bool all_drained = true, waiting = false;
    never_opened = false;
    for (auto& run : runs) {
      if (const int code = run->failed(); code != 0) return abandon(code);
      if (run->started()) {
        all_drained = run->sample(options) && all_drained;
      } else if (run->open_failed()) {
        never_opened = true;
      } else {
        waiting = true;  // its first attempt is under way
      }
    }
    if (options.until_drained && all_drained && !waiting) break;
  }
  if (stop_signal.requested()) spdlog::info("event=signal signal={}", stop_signal.number());
  // From here the whole stop, exit included, holds shutdown_deadline (the longest of the
  // pipelines') whatever the queues and the databases do: each step gets what is left
  // of the steps' share, and a watchdog ends the process at the deadline if a call
  // still hangs (what was not acked is delivered again later). The pipelines stop side
  // by side: one that hangs does not take the others' time.
  auto shutdown_deadline = first.container.shutdown_deadline;
  for (const auto& c : configs)
    shutdown_deadline = std::max(shutdown_deadline, c.container.shutdown_deadline);
  ShutdownSupervisor supervisor(shutdown_deadline);
  const auto deadline = supervisor.steps_deadline();
  std::vector<char> writers_stopped(runs.size(), 0);
  {
    std::vector<std::thread> stopping;
    for (std::size_t i = 0; i < runs.size(); ++i)
      stopping.emplace_back([&, i] {
        common::name_this_thread("sluice-stop", static_cast<int>(i + 1));
        runs[i]->stop_container(deadline);
        writers_stopped[i] = runs[i]->stop_writers(deadline, supervisor.interrupt_deadline());
      });
    for (auto& t : stopping) t.join();
  }
  bool all_stopped = true;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    summaries.push_back(
        runs[i]->summarize(writers_stopped[i] != 0, supervisor.interrupt_deadline(), started));
    all_stopped = all_stopped && writers_stopped[i];
  }
  const double cpu = process_cpu_seconds() - cpu_started;
  supervisor.disarm();
  print_summaries(summaries, cpu, options.quiet);
  if (tracer) {
    tracer->shutdown(std::chrono::seconds(1));  // the last spans, before the figures
    const auto t = tracer->stats();
    if (!options.quiet)
      std::cout << "  traces              " << t.spans_exported << " spans exported, "
                << t.spans_dropped << " dropped, " << t.export_failures << " failed exports ("
                << common::redact_password(first.tracer.otlp_endpoint) << ")\n";
    spdlog::info(
        "event=traces spans_started={} spans_exported={} spans_dropped={} "
        "export_requests={} export_failures={}",
        t.spans_started, t.spans_exported, t.spans_dropped, t.export_requests, t.export_failures);
  }
  if (!all_stopped)  // a writer thread is stuck in a database call: cannot join it
    exit_now(5,
             "event=stop_deadline writers_abandoned=true (their records are not acked: they "
             "are delivered again)");
  if (options.until_drained && !stop_signal.requested() && never_opened) {
    for (const auto& s : summaries)
      if (!s.never_started.empty())
        std::cerr << "sluice: pipeline " << s.name << ": never started: " << s.never_started
                  << "\n";
    return 3;
  }
  // Drained, but some records were never written (their last write failed and the queue
  // no longer offers them, e.g. its redrive policy moved them): say so, for scripts.
  std::uint64_t unresolved = 0;
  for (const auto& s : summaries) unresolved += s.unresolved;
  if (options.until_drained && !stop_signal.requested() && unresolved > 0) {
    std::cerr << "sluice: drained, but " << unresolved
              << " messages were never written (their last write failed; see the log lines "
                 "event=record_write_failed / sink_write_failed)\n";
    return 4;
  }
  return 0;
}

int run_pipeline(const PipelineConfig& config, const RunOptions& options, RunSummary& summary) {
  std::vector<RunSummary> summaries;
  const int code = run_pipelines({config}, options, summaries);
  if (!summaries.empty()) summary = summaries.front();
  return code;
}

}  // namespace sluice::app
