// The `sluice` command line. Exit codes: 0 success; 1 the work failed (messages not
// sent, round trip incomplete); 2 bad usage or configuration; 3 a sink could not be
// opened at start.
#include <spdlog/async.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <stdexcept>

#include "app/allocator.hpp"
#include "app/run.hpp"
#include "cli/autoscale.hpp"
#include "cli/ctl.hpp"
#include "cli/health.hpp"
#include "cli/plan.hpp"
#include "cli/publish.hpp"
#include "cli/rejects.hpp"
#include "cli/top.hpp"
#include "config/config.hpp"
#include "driver/verbs.hpp"
#include "ingest/reject_reasons.hpp"
#include "sluice/driver/sink_driver.hpp"
#include "sluice/driver/source_driver.hpp"

namespace {

// Asynchronous logging: callers hand lines to a queue, one thread writes (no handler waits
// on stderr).
void setup_logging(const std::string& level) {
  spdlog::init_thread_pool(8192, 1);
  auto sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  auto logger = std::make_shared<spdlog::async_logger>("sluice", sink, spdlog::thread_pool(),
                                                       spdlog::async_overflow_policy::block);
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%-5l%$ [%t] %v");
  spdlog::set_level(spdlog::level::from_str(level));
}

// The logging thread joined before the logger goes: spdlog::shutdown() alone may leave
// the logger's last reference to the exit handlers while that thread still runs
// (ThreadSanitizer saw the formatter freed under it).
void shutdown_logging() {
  auto logger = spdlog::default_logger();
  auto pool = spdlog::thread_pool();
  spdlog::shutdown();
  pool.reset();  // the last reference: joins the thread, after the lines it had queued
  logger.reset();
}

// A shared verb (queue stats, queue create, dlq): the first source whose choosing flag was
// given runs it, else a source that answers it by default.
int run_verb(const char* name, const std::vector<sluice::driver::SourceVerbs>& sources,
             std::optional<sluice::driver::SourceVerbs::Verb> sluice::driver::SourceVerbs::*verb) {
  std::string choices;
  for (const auto& source : sources)
    if (const auto& v = source.*verb; v && v->chosen()) return v->run();
  for (const auto& source : sources)
    if (const auto& v = source.*verb; v && v->fallback) return v->run();
  for (const auto& source : sources)
    if (const auto& v = source.*verb) choices += (choices.empty() ? "" : ", or ") + v->choose_with;
  std::cerr << "sluice " << name << ": give " << choices << "\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  // The drivers this binary was built with: two of one kind with one name (a
  // distribution registering a built-in's name) could not be told apart by source.type
  // or sink.type.
  try {
    sluice::driver::registered_drivers();
    sluice::sinks::registered_sink_drivers();
  } catch (const std::logic_error& e) {
    std::cerr << "sluice: this binary's drivers: " << e.what() << "\n";
    return 2;
  }
  CLI::App app{
      "sluice: drain message queues into databases, fast, bounded, once per business record"};
  app.require_subcommand(1);
  app.set_version_flag("--version", [] {
    return "sluice " SLUICE_VERSION " (" + sluice::app::allocator_in_use() + ")";
  });
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}))
      ->capture_default_str();

  // run
  std::string config_path;
  sluice::app::RunOptions run_options;
  auto* run = app.add_subcommand(
      "run", "Run the ingestion pipeline (queue -> decode -> normalize -> dedupe -> sink)");
  run->add_option("--config,-c", config_path, "pipeline YAML file")->required();
  run->add_flag("--until-drained", run_options.until_drained,
                "stop once the queue is empty and every message is settled (batch jobs, demos)");

  // publish, queue stats, queue create: what every source understands here; each
  // source's driver adds the flag that chooses it and its own (driver/verbs.hpp).
  sluice::app::PublishOptions publish;
  auto* pub = app.add_subcommand(
      "publish", "Send a JSON-lines file, or generated inventory events, with retries");
  pub->add_option("--large-share", publish.large_share,
                  "share of generated events padded to --large-bytes")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  pub->add_option("--large-bytes", publish.large_bytes, "size of the padded events")
      ->capture_default_str();
  pub->add_option("--file", publish.file, "JSON lines to send, one message per line");
  pub->add_option("--generate", publish.generate, "generate this many events (see --events)")
      ->check(CLI::Range(1, 100'000'000))
      ->capture_default_str();
  pub->add_option(
         "--duplicates", publish.duplicate_share,
         "share of generated events repeating an earlier business record (not byte-identical)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  pub->add_option("--malformed", publish.malformed_share,
                  "share of generated events broken on purpose")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  pub->add_option("--concurrency", publish.concurrency, "batches of 100 in flight")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  pub->add_option("--seed", publish.seed, "random seed of the generator")->capture_default_str();
  pub->add_option("--events", publish.events,
                  "what --generate makes: inventory (examples/inventory-pipeline.yaml) or orders "
                  "(examples/orders-pipeline.yaml: two payload versions)")
      ->check(CLI::IsMember({"inventory", "orders"}))
      ->capture_default_str();
  pub->add_option("--traceparent", publish.traceparent,
                  "a W3C trace context every message carries (default: TRACEPARENT and "
                  "TRACESTATE from the environment); consumers' spans join that trace");
  pub->add_option("--header", publish.headers,
                  "NAME=VALUE on every message, repeatable: an SQS message attribute (String), "
                  "an AMQP header")
      ->check([](const std::string& v) {
        return v.find('=') == std::string::npos || v.front() == '='
                   ? "expected NAME=VALUE, got '" + v + "'"
                   : std::string();
      });
  auto* queue = app.add_subcommand("queue", "Queue operations");
  queue->require_subcommand(1);
  auto* stats =
      queue->add_subcommand("stats", "Print the queue's attributes (backlog, in flight, delayed)");
  std::string create_name;
  auto* create = queue->add_subcommand("create", "Create a queue (idempotent) and print its URL");
  create->add_option("--name", create_name, "queue name (.fifo for FIFO)")->required();

  // config
  auto* config = app.add_subcommand("config", "Configuration tools");
  config->require_subcommand(1);
  auto* docs =
      config->add_subcommand("docs", "Print every option with its default (docs/configuration.md)");
  std::string check_path;
  auto* check = config->add_subcommand("check", "Validate a pipeline file and print what it does");
  check->add_option("--config,-c", check_path, "pipeline YAML file")->required();

  // autoscale
  sluice::app::AutoscaleOptions scale;
  auto* autoscale = app.add_subcommand(
      "autoscale",
      "The in-flight scaling signal: desired tasks (max over recent period averages of "
      "in-flight messages / capacity + spare) and task utilization for a queue");
  autoscale->add_option("--region", scale.region, "AWS region (an SQS queue, ECS, CloudWatch)");
  autoscale->add_option("--period", scale.period, "averaging period (1s to 1h)")
      ->capture_default_str();
  autoscale->add_option("--periods", scale.periods, "periods whose largest average counts")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  autoscale->add_option("--spare", scale.spare, "idle tasks kept ready (1 or 2 is usual)")
      ->check(CLI::Range(0, 10000))
      ->capture_default_str();
  autoscale
      ->add_option("--capacity", scale.capacity,
                   "messages one task works on at once (1: one message per task, as in the "
                   "ECS in-flight autoscaling pattern)")
      ->capture_default_str();
  autoscale->add_option("--running", scale.running, "tasks running now")
      ->check(CLI::Range(0L, 1'000'000L));
  autoscale->add_option("--ecs-cluster", scale.ecs_cluster,
                        "read the running count from this ECS cluster's service");
  autoscale->add_option("--ecs-service", scale.ecs_service, "the ECS service");
  autoscale->add_option("--ecs-endpoint-url", scale.ecs_endpoint_url, "ECS endpoint");
  autoscale
      ->add_option("--min-backlog", scale.min_backlog,
                   "gate: scale out only with at least this many visible messages (0: off)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  autoscale
      ->add_option("--min-oldest-age", scale.min_oldest_age,
                   "gate: scale out only once the oldest message is this old (--from "
                   "cloudwatch; 0s: off)")
      ->capture_default_str();
  autoscale
      ->add_option("--from", scale.from,
                   "queue: sample the queue's attributes; cloudwatch: AWS/SQS one-minute "
                   "statistics")
      ->check(CLI::IsMember({"queue", "cloudwatch"}))
      ->capture_default_str();
  autoscale->add_option("--sample-every", scale.sample_every,
                        "queue sampling interval (default: period / 6, 100ms to 10s)");
  autoscale->add_flag("--once", scale.once, "compute one value over periods x period and exit");
  autoscale->add_option("--serve", scale.serve,
                        "HOST:PORT: serve /metrics (Prometheus) and /autoscale (JSON, KEDA's "
                        "metrics-api scaler) continuously");
  autoscale->add_option("--cloudwatch", scale.cloudwatch_namespace,
                        "publish TaskUtilization (Percent) to this CloudWatch namespace every "
                        "period (ECS target tracking)");
  autoscale->add_option("--cloudwatch-endpoint-url", scale.cloudwatch_endpoint_url,
                        "CloudWatch endpoint");
  autoscale->add_option("--output", scale.output, "text or json")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();

  // dlq: each source adds the flag that chooses it (SQS --queue-url, RabbitMQ --queue).
  sluice::driver::DeadLetterRequest dead_letters;
  auto* dlq = app.add_subcommand("dlq", "Dead-letter queues (SQS, RabbitMQ): stats, peek, redrive");
  dlq->require_subcommand(1);
  auto* dlq_stats = dlq->add_subcommand(
      "stats",
      "Counts, and the reasons of a sample (of an SQS FIFO queue: the head of each group)");
  auto* dlq_peek = dlq->add_subcommand(
      "peek",
      "Show dead letters with their reasons without consuming them (SQS: visibility 0, and each "
      "look adds one to ApproximateReceiveCount; RabbitMQ: fetched unacknowledged, then "
      "requeued, marked redelivered)");
  dlq_peek->add_option("--max", dead_letters.max, "how many (default 10)")
      ->check(CLI::Range(1, 1000));
  dlq_peek->add_flag("--json", dead_letters.json, "one JSON object per line");
  auto* dlq_redrive = dlq->add_subcommand(
      "redrive", "Move dead letters back: never removed before the destination confirmed them");
  dlq_redrive->add_option("--to", dead_letters.to,
                          "the queue to move them to: SQS its URL, RabbitMQ its name (through "
                          "the default exchange)");
  dlq_redrive->add_option("--rate", dead_letters.rate, "at most this many a second (0: no cap)")
      ->check([](const std::string& text) -> std::string {
        const double r = std::atof(text.c_str());
        return r == 0 || (r >= 0.001 && r <= 100000) ? "" : "0 (no cap), or from 0.001 to 100000";
      });
  dlq_redrive->add_option("--max", dead_letters.max, "at most this many (0: all)")
      ->check(CLI::Range(std::size_t{0}, std::size_t{100'000'000}));
  dlq_redrive
      ->add_option("--filter-reason", dead_letters.filter_reason,
                   "only those dead-lettered for this reason (SQS: sluice-reject-reason, not on a "
                   "FIFO queue; RabbitMQ: sluice-reject-reason, else x-death's reason)")
      ->check([](const std::string& text) -> std::string {
        return text.empty() ? "a reason (empty would pick nothing out)" : "";
      });

  // Each source's flags for publish, queue stats/create, dlq and autoscale, and its own verbs.
  sluice::driver::VerbCommands commands{&app,      pub,          stats,        create,
                                        autoscale, &create_name, &scale.region};
  commands.dlq_stats = dlq_stats;
  commands.dlq_peek = dlq_peek;
  commands.dlq_redrive = dlq_redrive;
  commands.dead_letters = &dead_letters;
  std::vector<sluice::driver::SourceVerbs> sources;
  for (const auto* driver : sluice::driver::registered_drivers())
    driver->add_verbs(commands, sources.emplace_back());

  // top
  sluice::app::TopOptions top_options;
  auto* top =
      app.add_subcommand("top", "A live view of a running process from its /metrics (q quits)");
  top->add_option("--url", top_options.url,
                  "the process's metrics address, http://HOST:PORT (default: 127.0.0.1:9464)");
  top->add_option("--config", top_options.config, "or its config file (metrics.listen)");
  top->add_option("--interval", top_options.interval, "between refreshes")->capture_default_str();
  top->add_option("--iterations", top_options.iterations, "refreshes before exiting (0: until q)")
      ->capture_default_str();
  top->add_flag("--plain", top_options.plain,
                "one line per pipeline per refresh, even on a terminal (the default when standard "
                "output is not one)");
  // plan
  sluice::app::PlanOptions plan_options;
  auto* plan = app.add_subcommand(
      "plan",
      "Consumer sizing from a running pipeline's /metrics: visibility timeout, "
      "max_in_flight, concurrency, sink writers and batch size, with their formulas");
  plan->add_option("--metrics-url", plan_options.metrics_url, "the pipeline's /metrics")
      ->capture_default_str();
  plan->add_option("--duration", plan_options.duration, "how long to observe")
      ->capture_default_str();
  plan->add_option("--interval", plan_options.interval, "between scrapes")->capture_default_str();
  plan->add_option("--window", plan_options.window,
                   "span whose slowest rate is the minimum sustained rate")
      ->capture_default_str();
  plan->add_option("--headroom", plan_options.headroom,
                   "added to the visibility timeout (headroom for pauses such as garbage "
                   "collection)")
      ->capture_default_str();
  plan->add_option("--output", plan_options.output, "text or json")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  plan->add_option("--write", plan_options.write, "also write the values as a YAML fragment");
  plan->add_option("--pipeline", plan_options.pipeline,
                   "the pipeline to size, when the process runs several (its name)");

  // health
  std::string health_url = "http://127.0.0.1:9464/healthz";
  auto* health = app.add_subcommand(
      "health", "Exit 0 when a sluice endpoint answers 200 (container health checks without curl)");
  health->add_option("--url", health_url, "/healthz or /readyz of a running sluice")
      ->capture_default_str();

  // ctl
  sluice::app::CtlOptions ctl_options;
  auto* ctl = app.add_subcommand(
      "ctl",
      "Pause, resume or show the pipelines of a running sluice (admin.enabled; the token "
      "from SLUICE_ADMIN_TOKEN)");
  ctl->require_subcommand(1);
  for (const auto& [action, help] : std::vector<std::pair<std::string, std::string>>{
           {"pause", "Stop receiving; what is held is finished, its leases kept"},
           {"resume", "Receive again"},
           {"status", "The state and figures of one pipeline, or of every one"}}) {
    auto* sub = ctl->add_subcommand(action, help);
    sub->add_option("--url", ctl_options.url, "the running sluice's metrics.listen, as a URL")
        ->capture_default_str();
    sub->add_option("pipeline", ctl_options.pipeline, "the pipeline's name (its `name:` key)")
        ->required(action != "status");
    sub->callback([&ctl_options, action = action] { ctl_options.action = action; });
  }

  // rejects
  sluice::app::RejectsOptions rejects_options;
  long long rejects_limit = 0;
  auto* rejects = app.add_subcommand(
      "rejects", "The rejects table of a pipeline's sink: list, export as JSON lines, replay");
  rejects->require_subcommand(1);
  for (const auto& [action, help] : std::vector<std::pair<std::string, std::string>>{
           {"list", "The rejected messages, oldest first, with their reason"},
           {"export",
            "Each rejected body as a JSON line (for source.type: file); bodies that are not "
            "JSON are left out, counted"},
           {"replay",
            "Each row not yet replayed through the pipeline's current configuration, into its "
            "sink; stored, duplicate or filtered rows are marked replayed"}}) {
    auto* sub = rejects->add_subcommand(action, help);
    sub->add_option("--config", rejects_options.config_path, "the pipeline's file")->required();
    sub->add_option("--pipeline", rejects_options.pipeline,
                    "the pipeline, when the file has several (its name)");
    sub->add_option("--reason", rejects_options.reason, "only rows of this reason")
        ->check(CLI::IsMember(sluice::ingest::kRejectReasons));
    sub->add_option("--limit", rejects_limit,
                    action == "list" ? "at most this many rows (default 100; 0: every one)"
                                     : "at most this many rows (default: every one)")
        ->check(CLI::Range(0LL, 1000000000000LL));
    if (action != "replay")
      sub->add_flag("--all", rejects_options.all, "also the rows already replayed");
    if (action == "export")
      sub->add_option("--out", rejects_options.out, "the file to write (-: standard output)")
          ->capture_default_str();
    if (action == "replay")
      sub->add_flag("--dry-run", rejects_options.dry_run, "say what would happen, change nothing");
    sub->callback([&rejects_options, &rejects_limit, sub, action = action] {
      rejects_options.action = action;
      if (sub->count("--limit")) rejects_options.limit = static_cast<std::size_t>(rejects_limit);
    });
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version are successes; every other parse error is bad usage: 2
    // (README), not CLI11's own codes.
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  // Deployment checks: the command line as a manifest gives it parses, nothing runs.
  if (const char* check = std::getenv("SLUICE_CHECK_COMMAND_LINE"); check && *check == '1') {
    std::cout << "sluice: command line ok\n";
    return 0;
  }
  setup_logging(log_level);
  int code = EXIT_FAILURE;
  try {
    if (*run) {
      const auto configs = sluice::app::load_pipelines(config_path);
      if (log_level == "info")
        spdlog::set_level(spdlog::level::from_str(configs.front().log_level));
      for (const auto& cfg : configs)
        for (const auto& warning : cfg.warnings)
          spdlog::warn("event=config_key_renamed pipeline={} detail=\"{}\"", cfg.name, warning);
      std::vector<sluice::app::RunSummary> summaries;
      code = sluice::app::run_pipelines(configs, run_options, summaries);
      if (std::any_of(summaries.begin(), summaries.end(),
                      [](const auto& s) { return s.count_abandoned; })) {
        // A thread of the closing count is still in the database's client library:
        // exiting normally would destroy that library's statics under it.
        shutdown_logging();
        std::cout.flush();
        std::cerr.flush();
        std::_Exit(code);
      }
    } else if (*pub) {
      code = sluice::app::run_publish(publish, sources);
    } else if (*stats) {
      code = run_verb("queue stats", sources, &sluice::driver::SourceVerbs::queue_stats);
    } else if (*create) {
      code = run_verb("queue create", sources, &sluice::driver::SourceVerbs::queue_create);
    } else if (*dlq_stats) {
      code = run_verb("dlq stats", sources, &sluice::driver::SourceVerbs::dlq_stats);
    } else if (*dlq_peek) {
      code = run_verb("dlq peek", sources, &sluice::driver::SourceVerbs::dlq_peek);
    } else if (*dlq_redrive) {
      code = run_verb("dlq redrive", sources, &sluice::driver::SourceVerbs::dlq_redrive);
    } else if (*ctl) {
      code = sluice::app::run_ctl(ctl_options);
    } else if (*rejects) {
      code = sluice::app::run_rejects(rejects_options);
    } else if (*health) {
      code = sluice::app::probe(health_url);
    } else if (*plan) {
      code = sluice::app::run_plan(plan_options);
    } else if (*top) {
      if (top_options.url.empty() && top_options.config.empty())
        top_options.url = "http://127.0.0.1:9464";
      code = sluice::app::run_top(top_options);
    } else if (*autoscale) {
      code = sluice::app::run_autoscale(scale, sources);
    } else if (*docs) {
      std::cout << sluice::app::configuration_markdown();
      code = 0;
    } else if (*check) {
      const auto configs = sluice::app::load_pipelines(check_path);
      for (const auto& cfg : configs) {
        for (const auto& warning : cfg.warnings)
          std::cerr << "sluice: warning: " << warning << "\n";
        if (configs.size() > 1) std::cout << "pipeline " << cfg.name << ":\n";
        std::cout << sluice::app::describe(cfg);
      }
      code = 0;
    } else {
      for (const auto& source : sources)  // a verb of a source's own
        if (const auto own = source.run_own ? source.run_own() : std::nullopt) {
          code = *own;
          break;
        }
    }
  } catch (const sluice::app::ConfigError& e) {
    std::cerr << "sluice: configuration error: " << e.what() << "\n";
    code = 2;
  }
  shutdown_logging();
  return code;
}
