// The command-line verbs of the SQS source (driver/verbs.hpp): `publish --queue-url`
// (or --topic-arn: SNS fan-out to queues; large bodies through S3), `queue stats
// --queue-url`, `queue create` (the fallback when no other source is chosen), and verbs
// of its own: `round-trip`, `topic create` (SNS), `bucket create` (S3).
#include "driver/verbs.hpp"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/channel.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <functional>
#include <iostream>

#include "sluice/aws/error.hpp"
#include "sluice/aws/http.hpp"
#include "sluice/s3/client.hpp"
#include "sluice/sns/client.hpp"
#include "sluice/sqs/client.hpp"
#include "sluice/sqs/publisher.hpp"
#include "sqs/dead_letter_verbs.hpp"
#include "sqs/publish_verb.hpp"
#include "sqs/round_trip.hpp"
#include "sqs/verbs.hpp"

namespace sluice::sqs {
namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

namespace {

struct TopicFlags {
  std::string name;  // ".fifo" for a FIFO topic
  std::vector<std::string> subscribe_queue_urls;
  bool raw = false;          // RawMessageDelivery on the subscriptions
  std::string endpoint_url;  // SNS; SQS (for the queues' ARNs) from its own variables
  std::string region;
};

struct Flags {
  PublishFlags publish;
  std::string stats_url, stats_endpoint, stats_region;
  bool create_fifo = false;
  std::string create_endpoint, create_region;
  TopicFlags topic;
  std::string bucket_name, bucket_endpoint, bucket_region;
  std::string autoscale_url, autoscale_endpoint;
  RoundTripOptions round_trip;
  CLI::App *round_trip_command = nullptr, *topic_create = nullptr, *bucket_create = nullptr;
};

// Runs `body`; an AWS error it throws becomes the documented exit code.
template <class Body>
int with_exit_code(const char* name, Body body) {
  try {
    body();
    return 0;
  } catch (const aws::AwsError& e) {
    std::cerr << "sluice " << name << ": " << e.what() << "\n";
    return exit_code_of(e);
  }
}

// Runs a coroutine to completion.
template <class Make>
int run_command(const char* name, Make make) {
  return with_exit_code(name, [&] {
    asio::io_context io;
    auto result = asio::co_spawn(io, make(io.get_executor()), asio::use_future);
    io.run();
    result.get();
  });
}

// Runs one SQS call to completion; `print` shows its result.
template <class Call, class Print>
int sqs_command(const char* name, const std::string& endpoint, const std::string& region, Call call,
                Print print) {
  asio::io_context io;
  SqsClientOptions options;
  options.endpoint_url = endpoint;
  options.region = region;
  return with_exit_code(name, [&] {
    SqsClient client(io.get_executor(), options);
    auto result = asio::co_spawn(io, call(client), asio::use_future);
    io.run();
    print(result.get());
  });
}

int queue_stats(const std::string& queue_url, const std::string& endpoint,
                const std::string& region) {
  return sqs_command(
      "queue stats", endpoint, region,
      [&](auto& client) { return client.get_queue_attributes(queue_url); },
      [](const QueueAttributes& attributes) {
        for (const auto& [name, value] : attributes) std::cout << name << " " << value << "\n";
      });
}

int queue_create(const std::string& name, bool fifo, const std::string& endpoint,
                 const std::string& region) {
  if (fifo != name.ends_with(".fifo")) {
    std::cerr << "sluice queue create: --name '" << name << "'"
              << (fifo ? " with --fifo: a FIFO queue's name ends in .fifo\n"
                       : ": a name ending in .fifo is a FIFO queue's (add --fifo)\n");
    return 2;
  }
  QueueAttributes attributes;
  if (fifo) attributes["FifoQueue"] = "true";
  return sqs_command(
      "queue create", endpoint, region,
      [&](auto& client) { return client.create_queue(name, attributes); },
      [](const std::string& url) { std::cout << url << "\n"; });
}

asio::awaitable<void> create_topic(asio::any_io_executor executor, TopicFlags options) {
  sns::SnsClientOptions sns_options;
  sns_options.endpoint_url = options.endpoint_url;
  sns_options.region = options.region;
  sns::SnsClient sns(executor, sns_options);
  std::map<std::string, std::string> attributes;
  if (options.name.ends_with(".fifo")) attributes["FifoTopic"] = "true";
  const std::string topic = co_await sns.create_topic(options.name, attributes);
  std::cout << topic << "\n";
  if (options.subscribe_queue_urls.empty()) co_return;
  sqs::SqsClientOptions sqs_options;
  sqs_options.region = options.region;
  sqs::SqsClient sqs(executor, sqs_options);
  for (const auto& url : options.subscribe_queue_urls) {
    std::vector<std::string> names;  // not braced inside co_await: GCC 12 mis-compiles it
    names.emplace_back("QueueArn");
    const auto queue = co_await sqs.get_queue_attributes(url, names);
    auto arn = queue.find("QueueArn");
    if (arn == queue.end())
      throw aws::AwsError(aws::ErrorKind::integrity, "queue " + url + " has no QueueArn");
    std::map<std::string, std::string> subscription;
    if (options.raw) subscription["RawMessageDelivery"] = "true";
    std::cout << co_await sns.subscribe(topic, "sqs", arn->second, subscription) << "\n";
  }
}

asio::awaitable<void> create_bucket(asio::any_io_executor executor, std::string name,
                                    std::string endpoint_url, std::string region) {
  s3::S3ClientOptions options;
  options.endpoint_url = std::move(endpoint_url);
  options.region = std::move(region);
  s3::S3Client s3(executor, options);
  try {
    co_await s3.create_bucket(name);
  } catch (const aws::AwsError& e) {
    // Already ours: as idempotent as `queue create`.
    if (e.code() != "BucketAlreadyOwnedByYou") throw;
  }
  std::cout << name << "\n";
}

int run_topic_create(const TopicFlags& options) {
  return run_command("topic create", [&](asio::any_io_executor executor) {
    return create_topic(executor, options);
  });
}

int run_bucket_create(const std::string& name, const std::string& endpoint_url,
                      const std::string& region) {
  return run_command("bucket create", [&](asio::any_io_executor executor) {
    return create_bucket(executor, name, endpoint_url, region);
  });
}

// `sluice autoscale --queue-url`: in flight and visible from the queue's attributes.
class AttributesReader final : public driver::QueueReader {
 public:
  AttributesReader(asio::any_io_executor executor, std::string url, SqsClientOptions options)
      : url_(std::move(url)) {
    try {
      client_.emplace(std::move(executor), std::move(options));
    } catch (const aws::AwsError& e) {
      throw driver::VerbError(exit_code_of(e), e.what());
    }
  }
  asio::awaitable<driver::QueueReading> read() override {
    QueueAttributes attributes;
    try {
      attributes = co_await client_->get_queue_attributes(url_);
    } catch (const aws::AwsError& e) {
      throw driver::VerbError(exit_code_of(e), e.what());
    }
    auto number = [&](const char* name) {
      auto it = attributes.find(name);
      if (it == attributes.end())
        throw driver::VerbError(1, std::string("GetQueueAttributes answer has no ") + name);
      return std::stod(it->second);
    };
    co_return driver::QueueReading{number("ApproximateNumberOfMessagesNotVisible"),
                                   number("ApproximateNumberOfMessages")};
  }

 private:
  std::string url_;
  std::optional<SqsClient> client_;
};

std::string queue_name_of(const std::string& url) {
  const auto slash = url.find_last_of('/');
  return slash == std::string::npos ? url : url.substr(slash + 1);
}

}  // namespace

driver::SourceVerbs add_sqs_verbs(const driver::VerbCommands& commands) {
  auto flags = std::make_shared<Flags>();
  auto& publish = flags->publish;
  auto* pub = commands.publish;
  pub->add_option("--queue-url", publish.queue_url, "target SQS queue");
  pub->add_option("--endpoint-url", publish.endpoint_url,
                  "SQS endpoint (default: as the AWS CLI finds it)");
  pub->add_option("--region", publish.region, "AWS region");
  pub->add_option("--topic-arn", publish.topic_arn,
                  "target SNS topic (PublishBatch of 10; fan-out to its subscriptions)");
  pub->add_flag("--single", publish.sns_single, "SNS: one Publish call per message");
  pub->add_option("--group-id", publish.group_id,
                  "SQS: the MessageGroupId of every message, on a standard queue too (fair "
                  "queues: SQS keeps one group's backlog from delaying the others'); FIFO "
                  "default: g0 to g15 in turn");
  pub->add_option("--group-id-from", publish.group_id_from,
                  "SQS: the MessageGroupId from a field of each event, a JSON pointer such as "
                  "/tenantId (a string or an integer; an event without it goes without a group "
                  "to a standard queue, and is not sent to a FIFO one)");
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
  pub->add_option("--trace-carrier", publish.trace_carrier,
                  "SQS: how a trace context (--traceparent, TRACEPARENT) travels: "
                  "aws_trace_header (the AWSTraceHeader system attribute, none of the 10 message "
                  "attributes) or traceparent (W3C message attributes)")
      ->check(CLI::IsMember({"aws_trace_header", "traceparent"}))
      ->capture_default_str();

  auto* stats = commands.queue_stats;
  stats->add_option("--queue-url", flags->stats_url, "SQS queue");
  stats->add_option("--endpoint-url", flags->stats_endpoint, "SQS endpoint");
  stats->add_option("--region", flags->stats_region, "AWS region");

  auto* create = commands.queue_create;
  create->add_option("--endpoint-url", flags->create_endpoint, "SQS endpoint");
  create->add_option("--region", flags->create_region, "AWS region");
  create->add_flag("--fifo", flags->create_fifo, "FIFO queue (the name must end in .fifo)");

  auto* autoscale = commands.autoscale;
  autoscale->add_option("--queue-url", flags->autoscale_url, "SQS queue");
  autoscale->add_option("--endpoint-url", flags->autoscale_endpoint, "SQS endpoint");

  auto& round_trip = flags->round_trip;
  auto* demo = commands.app->add_subcommand(
      "round-trip",
      "Create a queue, publish events, drain them with overlapping long polls, verify and "
      "summarize");
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
  flags->round_trip_command = demo;

  auto& topic = flags->topic;
  auto* topics = commands.app->add_subcommand("topic", "SNS topic operations");
  topics->require_subcommand(1);
  auto* topic_create = topics->add_subcommand(
      "create", "Create a topic (idempotent), subscribe queues to it, print the ARNs");
  topic_create->add_option("--name", topic.name, "topic name (.fifo for FIFO)")->required();
  topic_create->add_option("--subscribe-queue-url", topic.subscribe_queue_urls,
                           "SQS queue to subscribe (repeatable; its SQS endpoint from "
                           "AWS_ENDPOINT_URL_SQS or AWS_ENDPOINT_URL)");
  topic_create->add_flag("--raw", topic.raw,
                         "RawMessageDelivery: the queues get the message, not the envelope");
  topic_create->add_option("--endpoint-url", topic.endpoint_url, "SNS endpoint");
  topic_create->add_option("--region", topic.region, "AWS region");
  flags->topic_create = topic_create;
  auto* buckets = commands.app->add_subcommand("bucket", "S3 bucket operations (large payloads)");
  buckets->require_subcommand(1);
  auto* bucket_create =
      buckets->add_subcommand("create", "Create a bucket (idempotent) and print its name");
  bucket_create->add_option("--name", flags->bucket_name, "bucket name")->required();
  bucket_create->add_option("--endpoint-url", flags->bucket_endpoint, "S3 endpoint");
  bucket_create->add_option("--region", flags->bucket_region, "AWS region");
  flags->bucket_create = bucket_create;

  driver::SourceVerbs verbs;
  verbs.publish = driver::SourceVerbs::Publish{
      "--queue-url (SQS), --topic-arn (SNS)",
      [flags] {  // a bucket alone chooses SQS too: its check says what is missing
        const auto& p = flags->publish;
        return !p.queue_url.empty() || !p.topic_arn.empty() || !p.payload_bucket.empty();
      },
      [flags] { return check_publish(flags->publish); },
      [flags](driver::PublishRequest request) {
        return run_publish(flags->publish, std::move(request));
      }};
  verbs.queue_stats = driver::SourceVerbs::Verb{
      "--queue-url (SQS)", [flags] { return !flags->stats_url.empty(); }, false,
      [flags] {
        return queue_stats(flags->stats_url, flags->stats_endpoint, flags->stats_region);
      }};
  const std::string* name = commands.queue_name;
  verbs.queue_create =
      driver::SourceVerbs::Verb{"SQS by default", [] { return false; }, /*fallback=*/true,
                                [flags, name] {
                                  return queue_create(*name, flags->create_fifo,
                                                      flags->create_endpoint, flags->create_region);
                                }};
  const std::string* region = commands.region;
  verbs.autoscale = driver::SourceVerbs::Autoscale{
      "--queue-url (SQS)",
      [flags] { return !flags->autoscale_url.empty(); },
      [] { return std::optional<std::string>(); },
      [flags, region](asio::any_io_executor executor) -> std::unique_ptr<driver::QueueReader> {
        SqsClientOptions options;
        options.endpoint_url = flags->autoscale_endpoint;
        options.region = *region;
        return std::make_unique<AttributesReader>(std::move(executor), flags->autoscale_url,
                                                  options);
      },
      [flags] { return queue_name_of(flags->autoscale_url); },
      [flags] {
        return std::optional<driver::QueueMetrics>(driver::QueueMetrics{
            "AWS/SQS", "QueueName", queue_name_of(flags->autoscale_url),
            "ApproximateNumberOfMessagesNotVisible", "ApproximateNumberOfMessagesVisible",
            "ApproximateAgeOfOldestMessage"});
      }};
  add_dead_letter_verbs(commands, verbs);
  verbs.run_own = [flags]() -> std::optional<int> {
    if (*flags->round_trip_command) return run_round_trip(flags->round_trip);
    if (*flags->topic_create) return run_topic_create(flags->topic);
    if (*flags->bucket_create)
      return run_bucket_create(flags->bucket_name, flags->bucket_endpoint, flags->bucket_region);
    return std::nullopt;
  };
  return verbs;
}

}  // namespace sluice::sqs
