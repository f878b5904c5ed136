#pragma once
// One AMQP 0-9-1 connection over rabbitmq-c, with errors as exceptions.
//
// rabbitmq-c is not thread-safe: a Connection and every call on it belong to one
// thread. Its heartbeats are sent and checked only while the library is called, so
// that thread must call it (wait_frame with a short timeout) at least every few
// seconds, whatever else it does.

#include <amqp.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "sluice/amqp/error.hpp"

namespace sluice::amqp {

// amqp[s]://user:password@host:port/vhost (RabbitMQ's URI spec: the vhost is the
// percent-decoded path without its leading '/'; no path is the vhost "/").
struct Uri {
  bool tls = false;
  std::string user = "guest";
  std::string password = "guest";
  std::string host = "localhost";
  int port = 5672;
  std::string vhost = "/";
  std::string redacted;  // the URI as given, its password replaced by ***
};

// Throws std::invalid_argument saying what is wrong, never repeating the password.
Uri parse_uri(const std::string& text);

// A channel.close that says a delivery stayed unacknowledged past the broker's
// consumer_timeout (406 PRECONDITION_FAILED, "delivery acknowledgement on channel N timed
// out. Timeout value used: T ms ..."): the timeout it names (0 ms when the text names
// none); nothing for any other close.
std::optional<std::chrono::milliseconds> consumer_timeout_of(int reply_code,
                                                             std::string_view reply_text);

struct ConnectionOptions {
  Uri uri;
  std::chrono::seconds heartbeat{60};  // 0: none
  std::string connection_name;         // shown by the broker (management UI, rabbitmqctl)
  std::string ca_file;                 // amqps: trust these CAs (empty: the system's)
  bool verify_peer = true;             // amqps: check the broker's certificate ...
  bool verify_hostname = true;         // ... and that it names the host
  std::chrono::milliseconds connect_timeout{10000};
  std::chrono::milliseconds rpc_timeout{30000};  // a synchronous call with no answer
};

// A durable queue's arguments.
struct QueueDeclaration {
  bool quorum = false;  // x-queue-type: quorum
  // With either set, x-dead-letter-exchange; with a routing key, dead letters go through
  // `dead_letter_exchange` ("" is the default exchange: the key names a queue).
  std::string dead_letter_exchange;
  std::string dead_letter_routing_key;
  int delivery_limit = 0;               // x-delivery-limit (quorum queues); 0: none
  bool single_active_consumer = false;  // x-single-active-consumer
  bool stream = false;                  // x-queue-type: stream
};

struct QueueInfo {
  std::uint32_t messages = 0;  // ready (not counting unacknowledged)
  std::uint32_t consumers = 0;
};

class Connection {
 public:
  // Connects, logs in (advertising consumer_cancel_notify, connection.blocked and
  // authentication_failure_close) and is ready for channels. Throws AmqpError.
  explicit Connection(const ConnectionOptions& options);
  ~Connection();  // closes politely when it can
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  amqp_connection_state_t raw() { return state_; }
  int fd() const;
  const std::string& describe() const { return describe_; }
  std::map<std::string, std::string> server_properties() const;

  void open_channel(std::uint16_t channel);
  void close_channel(std::uint16_t channel);  // never throws (the channel may be gone)
  // Passive declare: throws AmqpError with reply_code 404 when the queue is missing
  // (which closes the channel).
  QueueInfo inspect_queue(std::uint16_t channel, const std::string& queue);
  // A durable queue (see QueueDeclaration).
  QueueInfo declare_queue(std::uint16_t channel, const std::string& queue,
                          const QueueDeclaration& declaration = {});
  // Passive exchange.declare: throws AmqpError with reply_code 404 when it is missing.
  void inspect_exchange(std::uint16_t channel, const std::string& exchange);
  void delete_queue(std::uint16_t channel, const std::string& queue);
  void qos(std::uint16_t channel, std::uint16_t prefetch, bool whole_channel);
  std::string consume(std::uint16_t channel, const std::string& queue, const std::string& tag,
                      const amqp_table_t& arguments = amqp_empty_table);
  void cancel(std::uint16_t channel, const std::string& consumer_tag);  // no wait for cancel-ok
  void confirm_select(std::uint16_t channel);
  // The longest a synchronous call (a close at shutdown, say) waits for its answer.
  void set_call_timeout(std::chrono::milliseconds timeout);

  // Sends without waiting. Throw AmqpError{connection} when the socket fails.
  void ack(std::uint16_t channel, std::uint64_t tag, bool multiple);
  void nack(std::uint16_t channel, std::uint64_t tag, bool requeue);
  void reject(std::uint16_t channel, std::uint64_t tag, bool requeue);
  void send_method(std::uint16_t channel, amqp_method_number_t id, void* decoded);

  // The next method frame (heartbeats are answered while it waits). Throws AmqpError:
  // timeout past `deadline` ("no <what> from the broker in time"), connection when the
  // socket fails.
  amqp_frame_t wait_method(std::chrono::steady_clock::time_point deadline, const char* what);

  // Throws AmqpError after a synchronous call whose reply was not normal, answering
  // a close from the broker (close-ok) as the protocol asks.
  void check_reply(const char* what);

 private:
  [[noreturn]] void fail_socket(const char* what, int status);
  amqp_connection_state_t state_ = nullptr;
  std::string describe_;
  bool open_ = false;
};

// A field of rabbitmq-c's (a routing key, a body, a reply text) as a string.
std::string text(amqp_bytes_t bytes);

// "The broker closed the connection: 320 CONNECTION_FORCED - ..." from a close method.
std::string describe_close(const amqp_method_t& method);

}  // namespace sluice::amqp
