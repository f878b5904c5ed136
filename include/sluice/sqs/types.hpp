#pragma once
// SQS request and response types (JSON 1.0 protocol), free of any JSON library.

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::sqs {

// SQS limits, checked before a request leaves the process.
inline constexpr std::size_t kMaxBatchEntries = 10;
inline constexpr std::size_t kMaxMessageBytes = 1024 * 1024;  // per message and per batch
inline constexpr int kMaxWaitTimeSeconds = 20;
inline constexpr int kMaxVisibilityTimeoutSeconds = 12 * 60 * 60;
inline constexpr int kMaxDelaySeconds = 900;

struct MessageAttributeValue {
  std::string data_type;     // "String", "Number", "Binary", or with a ".custom" suffix
  std::string string_value;  // for String and Number
  std::string binary_value;  // raw bytes for Binary (base64 only on the wire)

  static MessageAttributeValue string(std::string value) {
    return {"String", std::move(value), {}};
  }
  static MessageAttributeValue number(std::string value) {
    return {"Number", std::move(value), {}};
  }
  static MessageAttributeValue binary(std::string bytes) {
    return {"Binary", {}, std::move(bytes)};
  }
  bool is_binary() const { return data_type.starts_with("Binary"); }
};
using MessageAttributes = std::map<std::string, MessageAttributeValue>;

struct Message {
  std::string message_id;
  std::string receipt_handle;
  std::string body;
  std::string md5_of_body;
  std::string md5_of_message_attributes;
  std::map<std::string, std::string> attributes;  // system attributes (SentTimestamp, ...)
  MessageAttributes message_attributes;

  int receive_count() const;                    // ApproximateReceiveCount, 0 if absent
  std::optional<std::string> group_id() const;  // MessageGroupId (FIFO)
  std::optional<std::string> sequence_number() const;
  std::optional<std::chrono::system_clock::time_point> sent_time() const;
};

// A received message seen in place (SqsClient::receive_message with a callback): views
// into the answer, valid only during the call it is passed to. Checked as a Message
// is: a receipt handle present, the digests verified.
struct MessageView {
  using Attribute = std::pair<std::string_view, std::string_view>;
  std::string_view message_id;
  std::string_view receipt_handle;
  std::string_view body;
  std::string_view md5_of_body;
  std::string_view md5_of_message_attributes;
  std::span<const Attribute> attributes;        // system attributes, in the answer's order
  const MessageAttributes& message_attributes;  // decoded (Binary values are raw bytes)

  std::optional<std::string_view> attribute(std::string_view name) const;  // the first so named
  int receive_count() const;  // ApproximateReceiveCount, 0 if absent or not a number
  Message to_message() const;
};

struct ReceiveMessageRequest {
  std::string queue_url;
  int max_messages = 10;                  // 1..10
  std::optional<int> wait_time_seconds;   // 0..20; absent: the queue's default
  std::optional<int> visibility_timeout;  // absent: the queue's default
  std::vector<std::string> system_attribute_names{"All"};
  std::vector<std::string> message_attribute_names{"All"};
  std::string receive_request_attempt_id;  // FIFO: makes a retried receive idempotent
};

struct SendMessageEntry {
  std::string id;  // batch entry id (ignored by single sends)
  std::string body;
  std::optional<int> delay_seconds;
  MessageAttributes message_attributes;
  std::string message_group_id;          // FIFO
  std::string message_deduplication_id;  // FIFO
  // The AWSTraceHeader system attribute (X-Ray's format): a trace context that costs
  // none of the 10 message attributes. The publisher fills it in (PublisherOptions).
  std::string aws_trace_header;
};

struct SendMessageResult {
  std::string message_id;
  std::string sequence_number;  // FIFO
};

struct DeleteMessageEntry {
  std::string id;
  std::string receipt_handle;
};

struct ChangeVisibilityEntry {
  std::string id;
  std::string receipt_handle;
  int visibility_timeout = 0;
};

struct BatchEntryFailure {
  std::string id;
  std::string code;
  std::string message;
  bool sender_fault = false;  // true: resending the same entry will fail again
};

struct BatchEntrySuccess {
  std::string id;
  std::string message_id;       // SendMessageBatch only
  std::string sequence_number;  // SendMessageBatch on FIFO queues
};

struct BatchResult {
  std::vector<BatchEntrySuccess> successful;
  std::vector<BatchEntryFailure> failed;
  bool all_succeeded() const { return failed.empty(); }
};

using QueueAttributes = std::map<std::string, std::string>;

// A move task of ListMessageMoveTasks (the service's redrive of a dead-letter queue).
struct MessageMoveTask {
  std::string status;  // RUNNING, COMPLETED, CANCELLING, CANCELLED, FAILED
  std::int64_t moved = 0;
  std::optional<std::int64_t> to_move;  // the count when it started, if the service says
  std::string failure_reason;
};

}  // namespace sluice::sqs
