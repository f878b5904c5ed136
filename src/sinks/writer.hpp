#pragma once
// Micro-batching sink writers (LevelDB's group commit, for queues): each writer
// thread gathers up to batch_size items or waits batch_timeout, writes them in one
// round trip and settles every message by its own record's outcome:
//   inserted or duplicate -> ack;  failed -> nack (redelivered later);
//   refused (the database will never take it) -> rejected with reason sink_refused;
//   a batch refused as a whole -> split in halves until the refused records are found,
//     the others written;
//   database unreachable -> waited for; other batch failures -> retried with jittered
//     backoff, then nacked.
// Rejected messages go to the rejects table (when enabled) before they are settled.
// A message is never acked before the database has its record.
// A record whose message belongs to an ordered group (SQS FIFO) is written without
// waiting for company: its group cannot advance until it is settled, so a timer
// would only add latency; records that arrive while a write runs still batch up.

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <variant>
#include <vector>

#include "sinks/sink.hpp"
#include "sluice/message.hpp"

namespace sluice::sinks {

struct WriterOptions {
  std::size_t batch_size = 100;
  std::chrono::milliseconds batch_timeout{20};
  int writers = 1;
  int max_attempts = 5;  // per batch, before its messages are nacked
  std::chrono::milliseconds retry_base{200};
  std::chrono::milliseconds retry_max{5000};
  bool rejects_table = true;
  bool dead_letter_queue = false;  // the container sends rejects to a DLQ
};

struct WriterEvents {
  std::function<void(std::size_t batch, std::chrono::nanoseconds latency)> batch_written;
  // Each record's outcome, with its message (failed: nacked, delivered again later).
  std::function<void(WriteOutcome, const Message&)> outcome;
  std::function<void(const std::string& error)> batch_failed;
};

struct RejectItem {
  RejectRow row;
};

class BatchWriter {
 public:
  using SinkFactory = std::function<std::unique_ptr<Sink>()>;
  BatchWriter(SinkFactory factory, WriterOptions options, WriterEvents events);
  ~BatchWriter();

  // Opens one sink per writer (creating tables and indexes); throws SinkError.
  void start();
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
  // the database returns); false when a writer still did not finish soon after (its
  // thread is then left running, detached: the caller should end the process).
  bool stop(std::chrono::steady_clock::time_point deadline);
  bool healthy() const { return healthy_.load(); }
  std::size_t queued() const;

 private:
  void enqueue(Item item);
  void run(Sink& sink);
  void write_records(Sink& sink, std::vector<Item>& items);
  void write_range(Sink& sink, std::span<Item> items, std::span<pipeline::Record> records,
                   std::vector<Item>& refused);
  void refuse(const Sink& sink, Item& item, const pipeline::Record& record, std::string detail,
              std::vector<Item>& refused);
  void write_rejects(Sink& sink, std::vector<Item>& items);
  bool sleep_unless_stopping(std::chrono::milliseconds d);

  SinkFactory factory_;
  WriterOptions options_;
  WriterEvents events_;
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  struct Queued {
    Item item;
    bool ordered;  // its message waits in an ordered group
  };
  std::deque<Queued> queue_;
  std::size_t ordered_queued_ = 0;  // items whose message waits in an ordered group
  bool stopping_ = false;
  std::atomic<bool> healthy_{true};
  std::vector<std::unique_ptr<Sink>> sinks_;
  std::vector<std::thread> threads_;
  int running_ = 0;  // writer threads not yet finished (under mutex_)
  bool abandoned_ = false;
  std::condition_variable finished_;
};

}  // namespace sluice::sinks
