#pragma once
// `sluice topic create` (SNS, with SQS subscriptions) and `sluice bucket create` (S3):
// what a demo or a test needs around a topic fan-out or large payloads.
#include <string>
#include <vector>

namespace sluice::app {

struct TopicCreateOptions {
  std::string name;  // ".fifo" for a FIFO topic
  std::vector<std::string> subscribe_queue_urls;
  bool raw = false;          // RawMessageDelivery on the subscriptions
  std::string endpoint_url;  // SNS; SQS (for the queues' ARNs) from its own variables
  std::string region;
};

// Prints the topic's ARN, then one subscription ARN per queue. Exit code: 0, 1 the
// service failed, 2 bad usage or configuration.
int topic_create(const TopicCreateOptions& options);
// Prints the bucket's name once it exists.
int bucket_create(const std::string& name, const std::string& endpoint_url,
                  const std::string& region);

}  // namespace sluice::app
