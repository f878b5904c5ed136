#pragma once
// `sluice publish --queue-url` (SQS) and `--topic-arn` (SNS): the bodies the binary made
// from --file or --generate, sent in batches, several at once, with progress; large
// bodies through S3; group ids for fair and FIFO queues (sqs/group_ids.hpp).
#include <cstddef>
#include <optional>
#include <string>

#include "driver/verbs.hpp"

namespace sluice::sqs {

struct PublishFlags {
  std::string queue_url;  // SQS ...
  std::string topic_arn;  // ... or SNS (PublishBatch; one Publish each with sns_single)
  bool sns_single = false;
  std::string endpoint_url;
  std::string region;
  // Large payloads: bodies over the threshold (0: the queue's maximum) go to S3.
  std::string payload_bucket;
  std::size_t payload_threshold = 0;
  std::string s3_endpoint_url;
  bool s3_path_style = false;
  std::string trace_carrier = "aws_trace_header";
  std::string group_id, group_id_from;  // MessageGroupId (sqs/group_ids.hpp)
};

// What is wrong with the flags given (naming the flag), or nothing.
std::optional<std::string> check_publish(const PublishFlags& options);
// The exit code (README: 0, 1 failed, 2 bad usage).
int run_publish(const PublishFlags& options, driver::PublishRequest request);

}  // namespace sluice::sqs
