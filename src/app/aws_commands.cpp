#include "app/aws_commands.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <iostream>

#include "sluice/aws/error.hpp"
#include "sluice/s3/client.hpp"
#include "sluice/sns/client.hpp"
#include "sluice/sqs/client.hpp"

namespace sluice::app {
namespace asio = boost::asio;

namespace {

// Runs a coroutine to completion; AWS errors become the documented exit codes.
template <class Make>
int run_command(const char* name, Make make) {
  asio::io_context io;
  try {
    auto result = asio::co_spawn(io, make(io.get_executor()), asio::use_future);
    io.run();
    result.get();
    return 0;
  } catch (const aws::AwsError& e) {
    std::cerr << "sluice " << name << ": " << e.what() << "\n";
    return e.kind() == aws::ErrorKind::configuration ? 2 : 1;
  }
}

asio::awaitable<void> create_topic(asio::any_io_executor executor, TopicCreateOptions options) {
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

}  // namespace

int topic_create(const TopicCreateOptions& options) {
  return run_command("topic create", [&](asio::any_io_executor executor) {
    return create_topic(executor, options);
  });
}

int bucket_create(const std::string& name, const std::string& endpoint_url,
                  const std::string& region) {
  return run_command("bucket create", [&](asio::any_io_executor executor) {
    return create_bucket(executor, name, endpoint_url, region);
  });
}

}  // namespace sluice::app
