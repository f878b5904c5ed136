#pragma once
// Publishing to RabbitMQ with publisher confirms: every message is published on a
// confirm channel (confirm.select) as mandatory and persistent, in windows whose
// confirms are awaited together (a window ends at `window` messages or
// `max_unconfirmed_bytes` of bodies, so that what a lost connection makes us publish
// again, and what the broker must buffer, stays bounded). publish() waits for every
// confirm of what it is given; send() queues a message and publishes a window once one
// is full, and wait_for_confirms() publishes the rest and waits for every confirm (the
// wait-for-all of Spring's waitForConfirms). A stream is published to like a queue. A message the
// broker nacks, or whose confirm never comes (a lost connection), is published again after a
// backoff, up to max_attempts; one it returns (mandatory: no queue is bound for its routing key)
// fails at once. While the broker blocks the connection (connection.blocked: a memory or disk
// alarm) nothing more is published and no confirm is timed out: publishing resumes at
// connection.unblocked. Blocking, for one thread (rabbitmq-c is not thread-safe).
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sluice/amqp/error.hpp"

namespace sluice::amqp {

class Connection;

struct PublisherOptions {
  std::string uri = "amqp://guest:guest@127.0.0.1:5672/%2f";
  std::string connection_name = "sluice-publisher";
  std::string ca_file;
  bool verify_hostname = true;
  bool mandatory = true;
  int max_attempts = 5;
  std::chrono::milliseconds base_delay{200};
  std::chrono::milliseconds max_delay{10000};
  std::chrono::milliseconds confirm_timeout{30000};  // not counting time blocked
  int window = 500;  // messages published before their confirms are awaited
  // Bodies' bytes published before their confirms are awaited (at least one message).
  std::size_t max_unconfirmed_bytes = 16 << 20;
};

struct OutgoingMessage {
  std::string body;
  std::string routing_key;
  std::string message_id;  // empty: one is made (returns are matched by it)
  std::string content_type = "application/json";
  bool persistent = true;
  std::map<std::string, std::string> headers;
};

struct PublishReport {
  std::size_t confirmed = 0;
  std::size_t returned = 0;  // unroutable (mandatory): failures
  std::size_t nacked = 0;    // basic.nack received (each published again while it may)
  std::size_t failed = 0;    // nacked or unconfirmed after every attempt
  std::size_t republished = 0;
  std::size_t blocked = 0;                   // connection.blocked received
  std::chrono::milliseconds blocked_for{0};  // publishing paused by them
  std::size_t total = 0;                     // messages given
  std::vector<std::string> errors;           // one line per distinct cause
  // basic.return frames by the broker's reason ("312 NO_ROUTE"); a message returned,
  // then published again after a lost connection, counts each time. Nacks carry no
  // reason (a queue's x-overflow reject-publish, a quorum queue without its quorum):
  // they are counted in `nacked`.
  std::map<std::string, std::size_t> returned_by_reason;
  // Every message confirmed by the broker.
  bool ok() const { return confirmed == total && returned == 0 && failed == 0; }
};

class Publisher {
 public:
  // Connects (throws AmqpError, sluice/amqp/error.hpp, never showing the password);
  // std::invalid_argument for a window under 1.
  explicit Publisher(PublisherOptions options);
  ~Publisher();

  // Publishes to `exchange` ("" is the default exchange: routing_key names the queue).
  // A message without a `traceparent` header gets the context of the message handled
  // on the calling thread (sluice::tracing::current()), as W3C headers.
  // `progress` is called after each window with the messages settled so far.
  PublishReport publish(const std::string& exchange, std::vector<OutgoingMessage> messages,
                        const std::function<void(std::size_t settled)>& progress = {});

  // Queues `message`; publishes the queue once a window's worth is there (then waits for
  // its confirms), or when the exchange changes.
  void send(const std::string& exchange, OutgoingMessage message);
  // Publishes what send() queued and waits for every confirm: the report of every message
  // sent since the last wait.
  PublishReport wait_for_confirms();

  // Serializes with nlohmann::json (define to_json for your type) and publishes.
  template <class T>
  PublishReport publish(const std::string& exchange, const std::string& routing_key,
                        const std::vector<T>& values) {
    std::vector<OutgoingMessage> messages;
    messages.reserve(values.size());
    for (const auto& v : values) {
      OutgoingMessage m;
      m.body = nlohmann::json(v).dump();
      m.routing_key = routing_key;
      messages.push_back(std::move(m));
    }
    return publish(exchange, std::move(messages));
  }

 private:
  void connect();
  void on_blocked(const std::string& reason, PublishReport& report);
  void on_unblocked(PublishReport& report);
  // Between windows (nothing unconfirmed): reads frames until connection.unblocked, as
  // long as the broker blocks (a lost connection ends it: AmqpError).
  void wait_while_blocked(PublishReport& report);
  void flush_sent();
  // publish() on the caller's vector (ids and trace headers are filled in there).
  PublishReport publish_in_place(const std::string& exchange,
                                 std::vector<OutgoingMessage>& messages,
                                 const std::function<void(std::size_t settled)>& progress);
  PublisherOptions options_;
  // send()'s queue, its exchange and bytes, and the report since the last wait.
  std::vector<OutgoingMessage> sent_;
  std::string sent_exchange_;
  std::size_t sent_bytes_ = 0;
  PublishReport sent_report_;
  bool blocked_ = false;
  std::chrono::steady_clock::time_point blocked_since_{};
  std::unique_ptr<Connection> connection_;
  std::uint64_t next_seq_ = 1;
  std::uint64_t id_counter_ = 0;
  std::string id_prefix_;
};

}  // namespace sluice::amqp
