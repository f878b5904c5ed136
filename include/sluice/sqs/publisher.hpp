#pragma once
// Publishing to SQS: serialize a value to JSON and send it, with
// retries; or send many, packed into SendMessageBatch calls of at most 10 entries
// and 1 MiB, resending only the entries that failed for a retriable reason.

#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sluice/sqs/client.hpp"
#include "sluice/sqs/large_payload.hpp"
#include "sluice/tracing.hpp"

namespace sluice::sqs {

struct PublisherOptions {
  // Attempts per entry on top of the client's own per-request retries; batch
  // entries that SQS rejects without sender fault are resent this many times.
  int max_attempts = 5;
  std::chrono::milliseconds base_delay{200};
  std::chrono::milliseconds max_delay{20000};
  // Bodies over the threshold stored in S3 and sent as the extended clients' pointer
  // (large_payloads.enabled with a bucket; the S3 region defaults to the queue's).
  LargePayloadOptions large_payloads;
  // How a trace context travels with each message: the one of the message being
  // handled on the calling thread (sluice::tracing::current(): a single listener's
  // handler), read when send() or send_batch() is called, for entries that carry none.
  // aws_trace_header: the AWSTraceHeader system attribute (X-Ray's format; none of the
  // 10 message attributes); traceparent: W3C `traceparent`/`tracestate` message
  // attributes (what OpenTelemetry's SDKs read); none: not passed on.
  enum class TraceCarrier { aws_trace_header, traceparent, none };
  TraceCarrier trace_carrier = TraceCarrier::aws_trace_header;
};

// Puts `context` on `entry` the way `carrier` says, unless the entry carries one already
// (traceparent: as AWSTraceHeader when W3C attributes would make it more than 10).
void inject_trace(SendMessageEntry& entry, const tracing::SpanContext& context,
                  PublisherOptions::TraceCarrier carrier);

class PayloadOffloader;

struct PublishOutcome {
  std::size_t index = 0;  // position in the input
  bool ok = false;
  std::string message_id;
  std::string error_code;
  std::string error_message;
  int attempts = 0;
};

class Publisher {
 public:
  Publisher(std::shared_ptr<SqsClient> client, std::string queue_url,
            PublisherOptions options = {});

  // Serializes with nlohmann::json (define to_json for your type) and sends, with
  // `entry`'s attributes, group and deduplication id when given. Two overloads, not a
  // default argument, and no coroutine frame of their own: g++ 12 freed a default
  // argument made inside a caller's co_await, and an aggregate temporary made there, at
  // the wrong address (examples/publish_receive.cpp, which the install test runs,
  // crashed so; pass a named value).
  template <class T>
  boost::asio::awaitable<SendMessageResult> publish(const T& value) {
    SendMessageEntry entry;
    entry.body = nlohmann::json(value).dump();
    return send(std::move(entry));
  }
  template <class T>
  boost::asio::awaitable<SendMessageResult> publish(const T& value, SendMessageEntry entry) {
    entry.body = nlohmann::json(value).dump();
    return send(std::move(entry));
  }

  // Sends one message; throws AwsError once retries are spent or the error is final.
  // With large payloads, a body over the threshold goes to S3 first.
  boost::asio::awaitable<SendMessageResult> send(SendMessageEntry entry);

  // Sends many messages in batches; one outcome per input entry, in input order.
  // Entry ids are assigned by the publisher (any given are ignored). With large
  // payloads, entries over the threshold go to S3 first (a failed store fails only
  // that entry, with the S3 error).
  boost::asio::awaitable<std::vector<PublishOutcome>> send_batch(
      std::vector<SendMessageEntry> entries);

  // How send_batch packs entries (by index): batches of at most 10 entries and 1 MiB,
  // in input order; for a caller that sends its own batches.
  static std::vector<std::vector<std::size_t>> pack(const std::vector<SendMessageEntry>& entries,
                                                    const std::vector<std::size_t>& indexes);

 private:
  // The coroutines send() and send_batch() return, once the caller's trace is on the
  // entries (a coroutine's body runs on whichever thread runs it, later).
  boost::asio::awaitable<SendMessageResult> send_traced(SendMessageEntry entry);
  boost::asio::awaitable<std::vector<PublishOutcome>> send_batch_traced(
      std::vector<SendMessageEntry> entries);
  boost::asio::awaitable<void> wait(int attempt);
  std::shared_ptr<SqsClient> client_;
  std::string queue_url_;
  PublisherOptions options_;
  aws::RetryStrategy backoff_;
  std::shared_ptr<PayloadOffloader> offloader_;  // with large_payloads.enabled
};

}  // namespace sluice::sqs
