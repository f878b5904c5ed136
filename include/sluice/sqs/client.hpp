#pragma once
// Amazon SQS client over the JSON 1.0 protocol: signed with SigV4, retried in the
// AWS standard mode, MD5 of every received body and attribute set verified.
// Errors are thrown as aws::AwsError carrying the SQS error code
// (QueueDoesNotExist, ReceiptHandleIsInvalid, OverLimit, ...).

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "sluice/aws/credentials.hpp"
#include "sluice/aws/http.hpp"
#include "sluice/aws/retry.hpp"
#include "sluice/sqs/types.hpp"

namespace sluice::sqs {

struct SqsClientOptions {
  std::string region;        // empty: AWS_REGION, AWS_DEFAULT_REGION, profile
  std::string endpoint_url;  // empty: AWS_ENDPOINT_URL_SQS, AWS_ENDPOINT_URL, profile, default
  std::shared_ptr<aws::CredentialsProvider> credentials;  // null: the default chain
  aws::RetryOptions retry;
  aws::HttpClientOptions http;
  bool verify_md5 = true;
};

struct SqsClientStats {
  std::uint64_t requests = 0;
  std::uint64_t retries = 0;
  std::uint64_t errors = 0;
};

class SqsClient {
 public:
  // Resolves region and endpoint from options and environment (not instance metadata:
  // use aws::resolve_region first for that). Throws AwsError{configuration}.
  SqsClient(boost::asio::any_io_executor executor, SqsClientOptions options = {});
  ~SqsClient();

  boost::asio::awaitable<std::vector<Message>> receive_message(ReceiveMessageRequest request);
  // The same without copying: each message is passed to `each` as views into the
  // answer, valid only during that call (nothing of a malformed answer is passed on).
  // Returns how many messages came. If `each` throws, the exception leaves this call
  // and the messages not yet passed on come back after their visibility timeout.
  // Pass a named std::function: GCC 12 mishandles temporaries inside co_await.
  boost::asio::awaitable<std::size_t> receive_message(ReceiveMessageRequest request,
                                                      std::function<void(const MessageView&)> each);
  boost::asio::awaitable<void> delete_message(std::string queue_url, std::string receipt_handle);
  boost::asio::awaitable<BatchResult> delete_message_batch(std::string queue_url,
                                                           std::vector<DeleteMessageEntry> entries);
  boost::asio::awaitable<void> change_message_visibility(std::string queue_url,
                                                         std::string receipt_handle,
                                                         int visibility_timeout);
  boost::asio::awaitable<BatchResult> change_message_visibility_batch(
      std::string queue_url, std::vector<ChangeVisibilityEntry> entries);
  boost::asio::awaitable<SendMessageResult> send_message(std::string queue_url,
                                                         SendMessageEntry entry);
  boost::asio::awaitable<BatchResult> send_message_batch(std::string queue_url,
                                                         std::vector<SendMessageEntry> entries);
  boost::asio::awaitable<std::string> get_queue_url(std::string queue_name,
                                                    std::string owner_account_id = {});
  boost::asio::awaitable<QueueAttributes> get_queue_attributes(std::string queue_url,
                                                               std::vector<std::string> names);
  // All attributes. (An overload, not a default argument: GCC 12 mis-compiles braced
  // default arguments in co_await expressions.)
  boost::asio::awaitable<QueueAttributes> get_queue_attributes(std::string queue_url);
  boost::asio::awaitable<std::string> create_queue(std::string queue_name,
                                                   QueueAttributes attributes = {});
  boost::asio::awaitable<void> delete_queue(std::string queue_url);
  boost::asio::awaitable<void> purge_queue(std::string queue_url);
  // All pages, following NextToken.
  boost::asio::awaitable<std::vector<std::string>> list_queues(std::string name_prefix = {});
  // The service's own redrive: moves a dead-letter queue's messages (by ARN) back to
  // their source queue, or to `destination_arn`; 0 messages a second: the service's
  // pace. Returns the task's handle. Not every service has it (fauxqs answers an
  // error): callers fall back to receive, send, delete.
  boost::asio::awaitable<std::string> start_message_move_task(std::string source_arn,
                                                              std::string destination_arn,
                                                              int max_per_second);
  // The dead-letter queue's move tasks, the latest first (at most 10).
  boost::asio::awaitable<std::vector<MessageMoveTask>> list_message_move_tasks(
      std::string source_arn);

  const std::string& region() const;
  const aws::Url& endpoint() const;
  SqsClientStats stats() const;
  aws::HttpClient& http();

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace sluice::sqs
