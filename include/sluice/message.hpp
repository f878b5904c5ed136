#pragma once
// A message as every source delivers it, with its acknowledgement handle.
//
// Delivery is at least once: a message is removed from its queue only after it is
// acknowledged (ack), and a message that is not acknowledged comes back. Each
// message is settled exactly once; later calls are ignored. Settling releases the
// message's in-flight permit, whatever the outcome.

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace sluice {

namespace tracing {
struct SpanContext;
}

namespace detail {
struct MessageState;
struct MessageAccess;
}  // namespace detail

class Message {
 public:
  Message() = default;

  std::string_view id() const;  // valid as long as the message (or a copy of it) is
  const std::string& body() const;
  // Source system attributes (SQS: SentTimestamp, MessageGroupId, SequenceNumber, ...).
  const std::map<std::string, std::string>& attributes() const;
  // Application headers (SQS message attributes; binary values base64-encoded).
  const std::map<std::string, std::string>& headers() const;
  // One of each, without building the maps above (a message stores them packed, and
  // builds the maps on their first call).
  std::optional<std::string_view> attribute(std::string_view name) const;
  std::optional<std::string_view> header(std::string_view name) const;
  int receive_count() const;  // 1 on the first delivery
  // The ordered group it belongs to (SQS FIFO MessageGroupId), if any.
  std::optional<std::string> group_id() const;
  const std::string& source() const;  // the queue it came from
  std::chrono::system_clock::time_point received_at() const;

  // Done: delete it from the queue (batched).
  void ack();
  // Failed: deliver it again after an exponential backoff on its receive count.
  void nack();
  // Give it back at once, unprocessed: no failure is counted.
  void release();
  // It can never succeed (malformed, invalid): dead-letter it with the reason, then
  // remove it. Without a dead-letter destination the source leaves it to the queue's
  // own redrive policy (SQS: hidden for 12 h).
  void reject(std::string reason);
  bool settled() const;

  // Traced by the container (Container::set_tracer): the context of its `process`
  // span, for a handler that sends on (a single listener's publishers find it by
  // themselves, as tracing::current()); null otherwise.
  const tracing::SpanContext* trace_context() const;
  // Adds an attribute to its `process` span (nothing when it is not sampled, or once
  // the message is settled).
  void set_trace_attribute(std::string_view key, std::string_view value);
  // Marks its `process` span failed (OpenTelemetry's error.type and status ERROR):
  // for a message acked although it failed for good (kept in a rejects table, say).
  void set_trace_error(std::string_view type, std::string_view description);

  bool valid() const { return state_ != nullptr; }

 private:
  friend struct detail::MessageAccess;
  explicit Message(std::shared_ptr<detail::MessageState> state) : state_(std::move(state)) {}
  std::shared_ptr<detail::MessageState> state_;
};

}  // namespace sluice
