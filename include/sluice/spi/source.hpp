#pragma once
// Writing a source of your own: the interface the container drives (the
// service-provider side of sluice/source.hpp). A source delivers messages and carries
// out the core's settlement verbs; the core never knows which queue it drains. Pull
// sources (SQS) and push sources (AMQP, with prefetch) both deliver through
// receive(max): the core never asks for more messages than it holds permits for.
// examples/custom_source shows a whole one, built against the installed package.
//
// Threads: receive(), open(), extend(), reject() and flush() run on the container's
// I/O thread (the context's executor); ack(), retry() and release() may be called
// from any thread (a handler settling on its own thread) and must be thread-safe.

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "sluice/position_store.hpp"
#include "sluice/source.hpp"
#include "sluice/spi/delivery.hpp"

namespace sluice::spi {

// What a source can do; the core composes its stages from these, never from types.
struct SourceCapabilities {
  // Leases can be extended (SQS visibility): the core runs a heartbeat that calls
  // extend() for held messages before `lease` runs out.
  bool extendable = false;
  std::chrono::milliseconds lease{0};
  // Messages carrying a group_id must be handled in order within their group (SQS FIFO,
  // RabbitMQ single-active-consumer queues): the core hands out a group's next message
  // only once the previous one is settled.
  bool ordered_groups = false;
  // The most messages one receive() returns; permits are asked for in such units.
  int max_batch = 10;
  // The source reports (SourceContext::acks_settled) when each ack() has reached the
  // queue or was given up: the core keeps the message's permit until then, so acks
  // waiting to be sent count against max_in_flight (memory stays bounded when the
  // queue is slow to take deletes).
  bool confirms_acks = false;
  // Messages are pushed to the source (AMQP consumers with prefetch): receive() only
  // takes what has arrived, so one receive loop is enough and the core's elastic
  // receives are off; the source scales its own consumers.
  bool push = false;
  // prepare() may block (it fetches S3 payloads): it never runs on the I/O thread,
  // whatever ContainerOptions::worker_threads says.
  bool blocking_prepare = false;
};

enum class SourceErrorKind {
  transient,  // the queue or the network failed; trying again later can help
  permanent,  // configuration or permissions: trying again will not help by itself
  cancelled,  // the operation was cancelled (stopping)
};
const char* to_string(SourceErrorKind kind);

// The one error type the core sees from any source.
class SourceError : public std::runtime_error {
 public:
  SourceError(SourceErrorKind kind, std::string code, const std::string& what)
      : std::runtime_error(what), kind_(kind), code_(std::move(code)) {}
  SourceErrorKind kind() const { return kind_; }
  const std::string& code() const { return code_; }  // the service's own code, if any

 private:
  SourceErrorKind kind_;
  std::string code_;
};

// What the core gives a source when it makes one.
struct SourceContext {
  boost::asio::any_io_executor executor;  // the container's I/O thread
  std::string name;                       // the container's name, for logs
  // Deletes the queue confirmed, deletes given up (those messages will be delivered
  // again), and how many of them came from ack() (whose permits the core then
  // returns, with confirms_acks). Any thread.
  std::function<void(std::size_t confirmed, std::size_t abandoned, std::size_t from_ack)>
      acks_settled;
  std::function<void(const std::string&)> warning;  // something to log
  // Every message held under `lease` is gone (the queue will deliver it again): the
  // core drops them without acknowledging and frees their permits. Any thread.
  std::function<void(std::uint64_t lease)> lease_lost;
  // The container's max_in_flight: a push source keeps the queue from sending more
  // than this many unacknowledged messages (prefetch).
  int max_in_flight = 0;
  // A figure of the source's own for metrics ("amqp_consumers", ...). Any thread.
  std::function<void(const std::string& name, double value)> gauge;
  // Where a source that reads a log keeps its position (sluice/position_store.hpp);
  // null: none (a restart starts where the source's options say).
  std::shared_ptr<PositionStore> positions;
};

// A source that reads a log (a stream, a file) tells the writers how far the log is
// done once a batch is: a sink that writes positions with its records
// (Sink::positions_with_records) then saves that position in the batch's transaction,
// and a restart resumes right after the last batch committed. Thread-safe: called by
// the writer threads, before each write of a batch.
class BatchPositions {
 public:
  virtual ~BatchPositions() = default;
  // The position done once `batch` (deliveries of this source) is, along with every
  // delivery settled already: the longest run, from where the log is done, of
  // deliveries settled or in `batch` (a delivery still open before them holds it
  // back; a delivery of a lease since lost counts for nothing). None when nothing is
  // done yet.
  virtual std::optional<PositionUpdate> done_with(std::span<const Delivery> batch) = 0;
  // `batch` is written (its rows, and the position done_with gave, are committed): it
  // counts as done for the next batches' positions from now, before its settlements
  // reach the source.
  virtual void written(std::span<const Delivery> batch) = 0;
};

class Source {
 public:
  virtual ~Source() = default;
  // Connects and learns what the queue is (e.g. whether it is FIFO). Throws
  // SourceError; the core tries again with backoff on a transient error.
  virtual boost::asio::awaitable<void> open() = 0;
  // Valid once open() has returned.
  virtual SourceCapabilities capabilities() const = 0;
  // Up to `max` messages (may be none). Cancellable: throws SourceError{cancelled}
  // or boost::system::system_error{operation_aborted}.
  virtual boost::asio::awaitable<std::vector<Delivery>> receive(int max) = 0;

  // Settlement verbs (each message gets exactly one). Thread-safe.
  virtual void ack(const Delivery& delivery) = 0;
  // With confirms_acks: intake is waiting for permits that pending acks hold, send
  // them now rather than at the next batching interval. Thread-safe.
  virtual void expedite_acks() {}
  // Failed: deliver it again, not before `backoff` has passed.
  virtual void retry(const Delivery& delivery, std::chrono::milliseconds backoff) = 0;
  // Give it back unprocessed, at once.
  virtual void release(const Delivery& delivery) = 0;
  // It can never succeed: to the dead-letter destination with its reason, then
  // removed (true), or left to the queue's own redrive policy when there is no
  // destination (false). Throws SourceError when it could not be dead-lettered (the
  // core then retries it).
  virtual boost::asio::awaitable<bool> reject(Delivery delivery, std::string reason) = 0;
  // Extendable sources: extend these leases now; returns how many were extended.
  virtual boost::asio::awaitable<std::size_t> extend(std::vector<Delivery> deliveries);

  // On a worker, just before the handler gets `unit`: completes its messages (the SQS
  // source fetches S3 payloads here, while the core holds the messages and extends
  // their leases). May block. A message that cannot be made ready gets a `problem`.
  virtual void prepare(std::span<const Delivery> /*unit*/) {}
  // Stopping: prepare() calls waiting now return at once (their units are released).
  virtual void stop_preparing() {}

  // Push sources: the consumers to run, MIN-MAX (Container::set_concurrent_receives
  // while running). Thread-safe.
  virtual void set_concurrency(int /*min*/, int /*max*/) {}

  // Sends every pending ack and settlement and waits for them.
  virtual boost::asio::awaitable<void> flush() = 0;
  // A source reading a log with a PositionStore: its positions for the writers (see
  // BatchPositions); null: none. Asked once, after the source is made.
  virtual std::shared_ptr<BatchPositions> batch_positions() { return nullptr; }
  virtual std::string describe() const = 0;
  // What Message::source() says for each of its messages (the queue's URL or address).
  virtual std::string message_source() const = 0;
  // For traces, as OpenTelemetry's messaging conventions name them: the system
  // ("aws_sqs", "rabbitmq"; empty: not said) and the queue's name.
  virtual std::string messaging_system() const { return {}; }
  virtual std::string destination_name() const { return message_source(); }
};

}  // namespace sluice::spi
