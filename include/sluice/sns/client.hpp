#pragma once
// Amazon SNS over its query protocol (form-encoded requests, XML answers), signed
// with SigV4: topics, SQS subscriptions and publishing (single and PublishBatch).
// Errors are aws::AwsError with SNS's code (NotFound, InvalidParameter, ...).

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "sluice/aws/credentials.hpp"
#include "sluice/aws/http.hpp"
#include "sluice/aws/retry.hpp"

namespace sluice::sns {

inline constexpr std::size_t kMaxBatchEntries = 10;
inline constexpr std::size_t kMaxMessageBytes = 256 * 1024;  // per message and per batch

struct SnsClientOptions {
  std::string region;        // empty: AWS_REGION, AWS_DEFAULT_REGION, profile
  std::string endpoint_url;  // empty: AWS_ENDPOINT_URL_SNS, AWS_ENDPOINT_URL, profile, default
  std::shared_ptr<aws::CredentialsProvider> credentials;  // null: the default chain
  aws::RetryOptions retry;
  aws::HttpClientOptions http;
};

// String, Number or Binary (raw bytes; base64 on the wire).
struct MessageAttribute {
  std::string data_type = "String";
  std::string value;
};

struct PublishEntry {
  std::string id;  // batch entry id (ignored by publish)
  std::string message;
  std::string subject;
  std::map<std::string, MessageAttribute> attributes;
  std::string message_group_id;          // FIFO topics
  std::string message_deduplication_id;  // FIFO topics
};

struct PublishBatchSuccess {
  std::string id;
  std::string message_id;
};
struct PublishBatchFailure {
  std::string id;
  std::string code;
  std::string message;
  bool sender_fault = false;
};
struct PublishBatchResult {
  std::vector<PublishBatchSuccess> successful;
  std::vector<PublishBatchFailure> failed;
};

class SnsClient {
 public:
  // Throws AwsError{configuration} (no region, a malformed endpoint).
  SnsClient(boost::asio::any_io_executor executor, SnsClientOptions options = {});
  ~SnsClient();

  // Returns the topic's ARN (the existing one when it is already there).
  boost::asio::awaitable<std::string> create_topic(std::string name,
                                                   std::map<std::string, std::string> attributes);
  boost::asio::awaitable<void> delete_topic(std::string topic_arn);
  // Returns the subscription's ARN; protocol "sqs" with a queue ARN as endpoint.
  boost::asio::awaitable<std::string> subscribe(std::string topic_arn, std::string protocol,
                                                std::string endpoint,
                                                std::map<std::string, std::string> attributes);
  // Returns the message id.
  boost::asio::awaitable<std::string> publish(std::string topic_arn, PublishEntry entry);
  // At most 10 entries with distinct ids.
  boost::asio::awaitable<PublishBatchResult> publish_batch(std::string topic_arn,
                                                           std::vector<PublishEntry> entries);

  const std::string& region() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace sluice::sns
