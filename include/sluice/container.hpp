#pragma once
// The listener container: turns a queue into a steady stream of handled messages.
//
//  - In-flight work is bounded by permits (max_in_flight): a receive asks only for
//    as many messages as it holds permits for, and a permit comes back when its
//    message is settled (acked, nacked, released), never when a batch ends. So a
//    slow message never idles the others, and memory is bounded whatever the backlog.
//  - Several long polls overlap (concurrent receives, elastic between a minimum and
//    a maximum, following how full the polls come back).
//  - Handlers run on a worker pool (or, for handlers that never block, on the I/O
//    thread); when the pool is saturated the receivers wait (backpressure, not
//    buffering).
//  - Deletes and visibility changes are batched, and always flushed on stop.
//  - Leases (SQS visibility) are extended for messages still held (heartbeat),
//    failures come back after an exponential backoff, ordered groups (SQS FIFO) keep
//    their order: a group's next message goes out once the previous one is settled
//    (or, for a batch handler that keeps the order itself, a group's run at a time).
//
// Delivery is at least once: handlers must be idempotent (see the pipeline's
// content-hash dedupe for one way).

#include <chrono>
#include <functional>
#include <limits>
#include <memory>
#include <span>
#include <string>

#include "sluice/message.hpp"
#include "sluice/position_store.hpp"
#include "sluice/source.hpp"

namespace sluice {

namespace tracing {
class Tracer;
}
namespace runtime {
class SimulatedContainer;
}

enum class ListenerMode {
  single,  // one handler call per message
  batch,   // one handler call per received batch, settled per message
};

enum class AckMode {
  on_success,  // ack when the handler returns, nack when it throws (unless it settled)
  always,      // ack when the handler returns or throws
  manual,      // the handler settles each message itself; a throw still nacks
};

// The container core's options; each source has its own (e.g. SqsSourceOptions).
// Names follow Spring Cloud AWS and Spring AMQP where users know them.
struct ContainerOptions {
  std::string name = "container";  // for logs and metrics

  // --- What affects behaviour
  ListenerMode listener_mode = ListenerMode::single;
  AckMode ack_mode = AckMode::on_success;
  // Extend the lease (SQS visibility) of held messages before it runs out, on
  // sources that can; every heartbeat_interval (0: a third of the source's lease).
  bool heartbeat = true;
  std::chrono::milliseconds heartbeat_interval{0};
  // Failed messages come back after b = base * 2^(receive_count-1), at most max, with
  // jitter: between b/2 and b, so that messages that failed together spread out.
  std::chrono::milliseconds failure_backoff_base{1000};
  std::chrono::milliseconds failure_backoff_max{std::chrono::hours(12)};
  std::chrono::milliseconds shutdown_deadline{30000};
  // Ordered groups (SQS FIFO): a group's next message goes out once the previous one
  // is settled, so a group advances one message per settlement. A batch handler that
  // keeps a group's order itself may take runs instead: a group's messages received
  // together (SQS returns up to 10 of a group at once) go to one call, in order, and
  // the group's next run once all of these are settled. The handler must then keep
  // their effects in order: write none after one it did not ack or reject (one
  // retried, released or lost releases the rest of its run, whose later acks are
  // ignored; a handler can see it with Message::settled()). Batch listener only.
  bool ordered_group_runs = false;

  // --- What affects performance
  int max_in_flight = 100;  // messages held at once (received, not settled)
  int min_concurrent_receives = 1;
  int max_concurrent_receives = 4;
  // Measure instead of MIN-MAX: receives double while throughput rises, settle where it
  // plateaus, step down when the handlers are the bottleneck, fall back when idle
  // (at most max_in_flight / the source's batch size, and 256).
  bool auto_concurrency = false;
  // Handler threads. 0: handlers run on the I/O thread, right after each receive, with
  // no hand-off and no wake-up (the cheapest path, for handlers that never block: no
  // I/O, no waiting on locks; one that blocks stalls every receive, heartbeat and
  // settlement, and one stuck past stop()'s deadline also stops the final flush: acks
  // not yet sent are lost and those messages come back). A source whose own
  // preparation blocks (S3 payloads) gets 16 workers instead. With workers, a handler
  // timed as fast gets several messages per hand-off (see kHandoffBudget).
  int worker_threads = 16;
  int handoff_capacity = 0;  // hand-offs queued for the workers; 0: max_in_flight
  // Elastic receives (Spring AMQP's triggers): add a receive after this many
  // consecutive full polls, drop one after this many consecutive empty ones.
  int consecutive_full_trigger = 3;
  int consecutive_empty_trigger = 3;
  std::chrono::milliseconds start_receive_min_interval{500};
  std::chrono::milliseconds stop_receive_min_interval{5000};
  std::chrono::milliseconds error_backoff_max{30000};  // failing receives back off up to this
  // At most this many messages received a second (0: no limit): a token bucket of one
  // receive's worth (the source's batch size), shared by the receive loops; a receive
  // that returns fewer gives the rest back. Over any window T: rate x T + one receive.
  double max_messages_per_second = 0;
};

// Throws std::invalid_argument naming the option, its value and what was expected.
void validate(const ContainerOptions& options);
inline constexpr int kMaxAutoReceives = 256;
// The most receives concurrency: auto runs: as many as max_in_flight can fill with full
// batches of max_batch, from 1 to kMaxAutoReceives.
int max_auto_receives(int max_in_flight, int max_batch);
// "4" or "2-4" (Spring's concurrency syntax) into min/max concurrent receives; "auto"
// sets auto_concurrency.
void parse_concurrency(const std::string& text, ContainerOptions& options);

// What stop() always gives the final flush of acks and visibility changes.
inline constexpr std::chrono::milliseconds kFinalFlushMin{500};

using MessageHandler = std::function<void(Message&)>;
using BatchHandler = std::function<void(std::span<Message>)>;
// A message its source could not make ready: its payload is missing or too large
// (`reason` payload_missing, payload_too_large, malformed), so it can never succeed.
// The handler must settle it (normally reject(reason)); if it does not, the core
// rejects it.
using UnusableHandler =
    std::function<void(Message&, const std::string& reason, const std::string& detail)>;

inline constexpr std::int64_t kNoLeaseDue = std::numeric_limits<std::int64_t>::min();

struct ContainerStats {
  std::uint64_t received = 0;
  std::uint64_t acked = 0;   // acks confirmed by the queue (handed over: a source without confirms)
  std::uint64_t failed = 0;  // nacked (handler failure)
  std::uint64_t released = 0;  // given back unprocessed
  std::uint64_t lost = 0;      // dropped unacknowledged: the source lost their lease
  std::uint64_t rejected = 0;
  std::uint64_t dead_lettered = 0;
  std::uint64_t empty_receives = 0;
  std::uint64_t receive_errors = 0;
  std::uint64_t visibility_extensions = 0;
  std::uint64_t handler_calls = 0;
  std::uint64_t handoffs = 0;  // hand-offs to the workers (each may wake one); 0 inline
  // Hand-offs of several messages whose rest was offered to another worker because one
  // handler call of them ran long (over 2 ms): a slow call holds up only itself.
  std::uint64_t handoffs_shared = 0;
  std::uint64_t failed_acks = 0;  // deletes given up (those messages come back)
  std::int64_t pending_acks = 0;  // acked, not yet confirmed by the queue (hold permits)
  // Least lease left at the latest heartbeat among messages due for extension; negative
  // when one had already run out; kNoLeaseDue when none was due.
  std::int64_t lease_remaining_min_ms = kNoLeaseDue;
  std::int64_t in_flight = 0;  // held now
  std::int64_t in_flight_peak = 0;
  bool paused = false;          // pause() in force
  int concurrent_receives = 0;  // receive loops running now
  int concurrent_receives_peak = 0;
  double poll_latency_ms_avg = 0;
  double handler_latency_ms_avg = 0;
};

// Hooks for metrics; called from the container's threads, must not block.
class ContainerObserver {
 public:
  virtual ~ContainerObserver() = default;
  virtual void on_receive(std::size_t /*messages*/, std::chrono::nanoseconds /*latency*/) {}
  virtual void on_receive_error(const std::string& /*what*/) {}
  virtual void on_handler(std::chrono::nanoseconds /*latency*/, bool /*ok*/) {}
  virtual void on_settled(const char* /*outcome: ack|retry|release|reject|lost*/) {}
  virtual void on_concurrency(int /*receives*/) {}
  // A source's own figure (e.g. "amqp_consumers", "amqp_connection_blocked").
  virtual void on_source_gauge(const std::string& /*name*/, double /*value*/) {}
};

class Container {
 public:
  // `source` comes from a source's factory, e.g. make_sqs_source(...).
  Container(ContainerOptions options, SourceFactory source, MessageHandler handler);
  Container(ContainerOptions options, SourceFactory source, BatchHandler handler);
  ~Container();  // stops with the configured deadline if still running
  Container(const Container&) = delete;
  Container& operator=(const Container&) = delete;

  void start();
  // Stops receiving at once (open long polls are cancelled), lets running handlers
  // finish until the deadline, releases messages not yet started, flushes deletes
  // and visibility changes, and returns: within the deadline, or kFinalFlushMin when
  // the deadline leaves the flush less. Safe to call more than once.
  void stop(std::chrono::milliseconds deadline);
  void stop();  // with options().shutdown_deadline
  bool running() const;

  // Changeable while running.
  void set_concurrent_receives(int min, int max);
  // Stops receiving while everything held goes on: handlers finish, settlements and
  // acks flow, leases are extended. A receive already open (an SQS long poll) is let
  // return (cancelling it would leave the service holding what it took for a
  // visibility timeout), and what it brings is handled: stats().concurrent_receives
  // falls to 0 once the pause is complete. A push source's prefetched deliveries wait
  // in it, unacknowledged. resume() receives again. Any thread; both idempotent.
  void pause();
  void resume();
  bool paused() const;

  void set_observer(std::shared_ptr<ContainerObserver> observer);  // before start()
  // Before start(): a `receive` span per receive, a `process` span per message
  // (sluice/tracing.hpp). Without one, nothing is traced and nothing is paid.
  void set_tracer(std::shared_ptr<tracing::Tracer> tracer);
  // Before start(): where a source that reads a log keeps its position
  // (sluice/position_store.hpp). Without one, a restart starts where its options say.
  void set_position_store(std::shared_ptr<PositionStore> store);
  // Before start(); without one, such messages are rejected with "reason: detail".
  // Messages whose payload failed for a passing reason are retried, never given here.
  void set_unusable_handler(UnusableHandler handler);
  ContainerStats stats() const;
  ContainerOptions options() const;  // a copy: the receive range may change while running
  const std::string& name() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
  friend class runtime::SimulatedContainer;  // the core's tests drive its time (not public)
};

}  // namespace sluice
