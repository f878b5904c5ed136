// The `sluice` command line. Exit codes: 0 success; 1 the work failed (messages not
// sent, round trip incomplete); 2 bad usage or configuration; 3 a sink could not be
// opened at start.
#include <spdlog/async.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#include <cstdlib>
#include <iostream>

#include "app/allocator.hpp"
#include "app/amqp_commands.hpp"
#include "app/autoscale.hpp"
#include "app/aws_commands.hpp"
#include "app/config.hpp"
#include "app/demo.hpp"
#include "app/health.hpp"
#include "app/plan.hpp"
#include "app/publish.hpp"
#include "app/run.hpp"
#include "sluice/aws/error.hpp"
#include "sluice/sqs/client.hpp"

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

// Runs one SQS call to completion; `print` shows its result. Exit code as documented.
template <class Call, class Print>
int sqs_command(const char* name, const std::string& endpoint, const std::string& region, Call call,
                Print print) {
  boost::asio::io_context io;
  sluice::sqs::SqsClientOptions options;
  options.endpoint_url = endpoint;
  options.region = region;
  try {
    sluice::sqs::SqsClient client(io.get_executor(), options);
    auto result = boost::asio::co_spawn(io, call(client), boost::asio::use_future);
    io.run();
    print(result.get());
    return 0;
  } catch (const sluice::aws::AwsError& e) {
    std::cerr << "sluice " << name << ": " << e.what() << "\n";
    return e.kind() == sluice::aws::ErrorKind::configuration ? 2 : 1;
  }
}

int queue_stats(const std::string& queue_url, const std::string& endpoint,
                const std::string& region) {
  return sqs_command(
      "queue stats", endpoint, region,
      [&](auto& client) { return client.get_queue_attributes(queue_url); },
      [](const sluice::sqs::QueueAttributes& attributes) {
        for (const auto& [name, value] : attributes) std::cout << name << " " << value << "\n";
      });
}

int queue_create(const std::string& name, bool fifo, const std::string& endpoint,
                 const std::string& region) {
  sluice::sqs::QueueAttributes attributes;
  if (fifo) attributes["FifoQueue"] = "true";
  return sqs_command(
      "queue create", endpoint, region,
      [&](auto& client) { return client.create_queue(name, attributes); },
      [](const std::string& url) { std::cout << url << "\n"; });
}

}  // namespace

int main(int argc, char** argv) {
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

  // publish
  sluice::app::PublishOptions publish;
  auto* pub = app.add_subcommand(
      "publish", "Send a JSON-lines file, or generated inventory events, with retries");
  pub->add_option("--queue-url", publish.queue_url, "target SQS queue");
  pub->add_option("--amqp-url", publish.amqp_url,
                  "RabbitMQ instead: amqp://user:password@host:port/vhost (or SLUICE_AMQP_URL)")
      ->envname("SLUICE_AMQP_URL");
  pub->add_option("--exchange", publish.exchange, "RabbitMQ exchange (default: the default one)");
  pub->add_option("--routing-key", publish.routing_key,
                  "RabbitMQ routing key (with the default exchange: the queue's name)");
  pub->add_option("--endpoint-url", publish.endpoint_url,
                  "SQS endpoint (default: as the AWS CLI finds it)");
  pub->add_option("--region", publish.region, "AWS region");
  pub->add_option("--topic-arn", publish.topic_arn,
                  "target SNS topic (PublishBatch of 10; fan-out to its subscriptions)");
  pub->add_flag("--single", publish.sns_single, "SNS: one Publish call per message");
  pub->add_option("--large-payload-bucket", publish.payload_bucket,
                  "SQS: bodies over the threshold go to this S3 bucket, sent as the AWS extended "
                  "clients' pointer");
  pub->add_option("--payload-threshold", publish.payload_threshold,
                  "bytes of body and attributes above which a body goes to S3 (0: the queue's "
                  "MaximumMessageSize)")
      ->capture_default_str();
  pub->add_option("--s3-endpoint-url", publish.s3_endpoint_url,
                  "S3 endpoint (default: AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, AWS)");
  pub->add_flag("--s3-path-style", publish.s3_path_style, "S3 path-style addressing");
  pub->add_option("--large-share", publish.large_share,
                  "share of generated events padded to --large-bytes")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  pub->add_option("--large-bytes", publish.large_bytes, "size of the padded events")
      ->capture_default_str();
  pub->add_option("--file", publish.file, "JSON lines to send, one message per line");
  pub->add_option("--generate", publish.generate, "generate this many inventory events")
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

  // queue stats
  auto* queue = app.add_subcommand("queue", "Queue operations");
  queue->require_subcommand(1);
  std::string stats_url, stats_endpoint, stats_region, amqp_url, amqp_queue, management_url;
  auto* stats =
      queue->add_subcommand("stats", "Print the queue's attributes (backlog, in flight, delayed)");
  stats->add_option("--queue-url", stats_url, "SQS queue");
  stats->add_option("--amqp-url", amqp_url, "RabbitMQ instead: amqp://user:password@host/vhost")
      ->envname("SLUICE_AMQP_URL");
  stats->add_option("--queue", amqp_queue, "RabbitMQ queue name");
  stats->add_option("--management-url", management_url,
                    "RabbitMQ: the management plugin (http://host:15672), for unacknowledged "
                    "counts");
  stats->add_option("--endpoint-url", stats_endpoint, "SQS endpoint");
  stats->add_option("--region", stats_region, "AWS region");

  std::string create_name, create_endpoint, create_region;
  bool create_fifo = false;
  bool create_quorum = false;
  std::string create_dlx;
  auto* create = queue->add_subcommand("create", "Create a queue (idempotent) and print its URL");
  create->add_option("--name", create_name, "queue name (.fifo for FIFO)")->required();
  create->add_option("--amqp-url", amqp_url, "RabbitMQ instead: amqp://user:password@host/vhost");
  create->add_flag("--quorum", create_quorum, "RabbitMQ: a quorum queue");
  create->add_option("--dead-letter-exchange", create_dlx,
                     "RabbitMQ: the queue's x-dead-letter-exchange");
  create->add_option("--endpoint-url", create_endpoint, "SQS endpoint");
  create->add_option("--region", create_region, "AWS region");
  create->add_flag("--fifo", create_fifo, "FIFO queue (the name must end in .fifo)");

  // config
  auto* config = app.add_subcommand("config", "Configuration tools");
  config->require_subcommand(1);
  auto* docs =
      config->add_subcommand("docs", "Print every option with its default (docs/configuration.md)");
  std::string check_path;
  auto* check = config->add_subcommand("check", "Validate a pipeline file and print what it does");
  check->add_option("--config,-c", check_path, "pipeline YAML file")->required();

  // round-trip
  sluice::app::RoundTripOptions round_trip;
  auto* demo = app.add_subcommand("round-trip",
                                  "Create a queue, publish events, drain them with overlapping "
                                  "long polls, verify and summarize");
  demo->add_option("--endpoint-url", round_trip.endpoint_url, "SQS endpoint");
  demo->add_option("--region", round_trip.region, "AWS region");
  demo->add_option("--queue", round_trip.queue_name, "queue name")->capture_default_str();
  demo->add_option("--messages", round_trip.messages, "messages to publish")
      ->check(CLI::Range(1, 10'000'000))
      ->capture_default_str();
  demo->add_option("--concurrent-receives", round_trip.concurrent_receives,
                   "long polls in flight at once")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  demo->add_flag("--keep-queue", round_trip.keep_queue, "do not delete the queue afterwards");

  // topic create (SNS), bucket create (S3)
  sluice::app::TopicCreateOptions topic_options;
  auto* topic = app.add_subcommand("topic", "SNS topic operations");
  topic->require_subcommand(1);
  auto* topic_create = topic->add_subcommand(
      "create", "Create a topic (idempotent), subscribe queues to it, print the ARNs");
  topic_create->add_option("--name", topic_options.name, "topic name (.fifo for FIFO)")->required();
  topic_create->add_option("--subscribe-queue-url", topic_options.subscribe_queue_urls,
                           "SQS queue to subscribe (repeatable; its SQS endpoint from "
                           "AWS_ENDPOINT_URL_SQS or AWS_ENDPOINT_URL)");
  topic_create->add_flag("--raw", topic_options.raw,
                         "RawMessageDelivery: the queues get the message, not the envelope");
  topic_create->add_option("--endpoint-url", topic_options.endpoint_url, "SNS endpoint");
  topic_create->add_option("--region", topic_options.region, "AWS region");
  std::string bucket_name, bucket_endpoint, bucket_region;
  auto* bucket = app.add_subcommand("bucket", "S3 bucket operations (large payloads)");
  bucket->require_subcommand(1);
  auto* bucket_create =
      bucket->add_subcommand("create", "Create a bucket (idempotent) and print its name");
  bucket_create->add_option("--name", bucket_name, "bucket name")->required();
  bucket_create->add_option("--endpoint-url", bucket_endpoint, "S3 endpoint");
  bucket_create->add_option("--region", bucket_region, "AWS region");

  // autoscale
  sluice::app::AutoscaleOptions scale;
  auto* autoscale = app.add_subcommand(
      "autoscale",
      "The in-flight scaling signal: desired tasks (max over recent period averages of "
      "in-flight messages / capacity + spare) and task utilization for a queue");
  autoscale->add_option("--queue-url", scale.queue_url, "SQS queue");
  autoscale->add_option("--endpoint-url", scale.endpoint_url, "SQS endpoint");
  autoscale->add_option("--region", scale.region, "AWS region");
  autoscale
      ->add_option("--amqp-url", scale.amqp_url,
                   "RabbitMQ instead: amqp://user:password@host/vhost (or SLUICE_AMQP_URL)")
      ->envname("SLUICE_AMQP_URL");
  autoscale->add_option("--queue", scale.amqp_queue, "RabbitMQ queue name");
  autoscale->add_option("--management-url", scale.management_url,
                        "RabbitMQ: the management plugin (http://host:15672): unacknowledged "
                        "messages are the in-flight count");
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

  // health
  std::string health_url = "http://127.0.0.1:9464/healthz";
  auto* health = app.add_subcommand(
      "health", "Exit 0 when a sluice endpoint answers 200 (container health checks without curl)");
  health->add_option("--url", health_url, "/healthz or /readyz of a running sluice")
      ->capture_default_str();

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
      const auto cfg = sluice::app::load_config(config_path);
      if (log_level == "info") spdlog::set_level(spdlog::level::from_str(cfg.log_level));
      for (const auto& warning : cfg.warnings)
        spdlog::warn("event=config_key_renamed detail=\"{}\"", warning);
      sluice::app::RunSummary summary;
      code = sluice::app::run_pipeline(cfg, run_options, summary);
      if (summary.count_abandoned) {
        // A thread of the closing count is still in the database's client library:
        // exiting normally would destroy that library's statics under it.
        spdlog::shutdown();
        std::cout.flush();
        std::cerr.flush();
        std::_Exit(code);
      }
    } else if (*pub) {
      code = sluice::app::run_publish(publish);
    } else if (*stats && stats_url.empty() && amqp_url.empty()) {
      std::cerr << "sluice queue stats: give --queue-url (SQS) or --amqp-url (or "
                   "SLUICE_AMQP_URL) with --queue (RabbitMQ)\n";
      code = 2;
    } else if (*stats) {
      // --queue-url chooses SQS even when SLUICE_AMQP_URL is set.
      code = !stats_url.empty()
                 ? queue_stats(stats_url, stats_endpoint, stats_region)
                 : sluice::app::amqp_queue_stats(amqp_url, amqp_queue, management_url);
    } else if (*create) {
      code = amqp_url.empty()
                 ? queue_create(create_name, create_fifo, create_endpoint, create_region)
                 : sluice::app::amqp_queue_create(amqp_url, create_name, create_quorum, create_dlx);
    } else if (*topic_create) {
      code = sluice::app::topic_create(topic_options);
    } else if (*bucket_create) {
      code = sluice::app::bucket_create(bucket_name, bucket_endpoint, bucket_region);
    } else if (*health) {
      code = sluice::app::probe(health_url);
    } else if (*plan) {
      code = sluice::app::run_plan(plan_options);
    } else if (*autoscale) {
      code = sluice::app::run_autoscale(scale);
    } else if (*docs) {
      std::cout << sluice::app::configuration_markdown();
      code = 0;
    } else if (*check) {
      const auto cfg = sluice::app::load_config(check_path);
      for (const auto& warning : cfg.warnings) std::cerr << "sluice: warning: " << warning << "\n";
      std::cout << sluice::app::describe(cfg);
      code = 0;
    } else if (*demo) {
      code = sluice::app::run_round_trip(round_trip);
    }
  } catch (const sluice::app::ConfigError& e) {
    std::cerr << "sluice: configuration error: " << e.what() << "\n";
    code = 2;
  }
  spdlog::shutdown();
  return code;
}
