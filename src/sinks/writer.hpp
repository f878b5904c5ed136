#pragma once
// Micro-batching sink writers (LevelDB's group commit, for queues): each writer
// thread gathers up to batch_size items or waits batch_timeout, writes them in one
// round trip and settles every message by its own record's outcome:
//   inserted or duplicate -> ack;  failed -> nack (redelivered later);
//   refused (the database will never take it) -> rejected with reason sink_refused;
//   a batch refused as a whole -> split in halves until the refused records are found,
//     the others written;
//   database unreachable -> waited for; other batch failures -> retried with jittered
//     backoff, then nacked; a batch failing again with a record delivered before in it
//     -> its halves written once each, down to the record that fails while its
//     batch-mates are written (both halves failing: an outage, all nacked; not for
//     ordered groups); a record failing on its own max_record_failures deliveries in a
//     row (while the database takes other records) -> refused.
// Rejected messages go to the rejects table (when enabled) before they are settled.
// A message is never acked before the database has its record.
// A record whose message belongs to an ordered group (SQS FIFO) is written without
// waiting for company: its group cannot advance until it is settled, so a timer
// would only add latency; records that arrive while a write runs still batch up. A
// group's records are written by one writer at a time in the order submitted (several
// in one batch when the sink's batches are all or nothing: the writers' queue,
// write_queue.hpp), and a record whose message
// is settled before its write (released behind one of its group that failed) is not
// written: each group's rows reach the database in its order.

#include <chrono>
#include <functional>
#include <memory>
#include <variant>
#include <vector>

#include "sluice/driver/sink.hpp"
#include "sluice/message.hpp"
#include "sluice/tracing.hpp"

namespace sluice::sinks {

struct WriterOptions {
  std::size_t batch_size = 100;
  std::chrono::milliseconds batch_timeout{20};
  int writers = 1;
  int max_attempts = 5;  // per batch, before its messages are nacked
  // A record the database fails on its own (a write error with a code not known to be
  // permanent) this many deliveries in a row is refused: it cannot come back forever.
  int max_record_failures = 5;
  std::chrono::milliseconds retry_base{200};
  std::chrono::milliseconds retry_max{5000};
  bool rejects_table = true;
  // The pipeline's name, in the rows it writes to the rejects table (several pipelines
  // may share one).
  std::string pipeline;
  bool dead_letter_queue = false;  // the container sends rejects to a DLQ
  // Traces: a span per batch write ("INSERT events"), linked to the process span of
  // each message it carries; OpenTelemetry's database conventions name its attributes.
  std::shared_ptr<tracing::Tracer> tracer;
  std::string db_system;      // "sqlite", "postgresql", "mongodb"
  std::string db_collection;  // the table or collection
};

// " trace_id=<hex>" for a log line about a traced message, else "".
std::string trace_field(const Message& message);

struct WriterEvents {
  std::function<void(std::size_t batch, std::chrono::nanoseconds latency)> batch_written;
  // Each record's outcome, with its message (failed: nacked, delivered again later).
  std::function<void(WriteOutcome, const Message&)> outcome;
  std::function<void(const std::string& error)> batch_failed;
  // A refused record's message properties for its rejects row (RejectRow::properties).
  std::function<std::string(const Message&)> properties;
};

class BatchWriter {
 public:
  using SinkFactory = std::function<std::unique_ptr<Sink>()>;
  BatchWriter(SinkFactory factory, WriterOptions options, WriterEvents events);
  ~BatchWriter();

  // Opens one sink per writer (creating tables and indexes); throws SinkError.
  void start();
  // From another thread: a start() under way gives up soon (the sink being opened is
  // interrupted, where its driver can be: PostgreSQL within a poll slice) and throws;
  // a later one throws at once.
  void interrupt_start();
  struct Item {
    std::variant<pipeline::Record, RejectRow> payload;
    Message message;
  };
  void submit(pipeline::Record record, Message message);
  void submit_reject(RejectRow row, Message message);
  // Several at once (a received batch): one lock, one wake-up.
  void submit_all(std::vector<Item> items);
  // Writes everything queued, then joins the writers.
  void stop();
  // The same, bounded: at the deadline every sink is interrupted (a call blocked in
  // the database returns); false when a writer still did not finish by `give_up`. Its
  // thread is then left running on state it shares (never freed under it), but it
  // still calls the events' callbacks if its call ever returns: the caller should end
  // the process, as `sluice run` does.
  bool stop(std::chrono::steady_clock::time_point deadline,
            std::chrono::steady_clock::time_point give_up);
  bool healthy() const;
  std::size_t queued() const;

  struct Core;  // the queue, the sinks and the writer threads' loop (writer.cpp)

 private:
  std::shared_ptr<Core> core_;
};

}  // namespace sluice::sinks
