#include "sinks/writer.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "common/mutex.hpp"
#include "common/thread_name.hpp"
#include "runtime/backoff.hpp"
#include "sinks/log_positions.hpp"
#include "sinks/write_queue.hpp"

namespace sluice::sinks {
using Clock = std::chrono::steady_clock;

struct BatchWriter::Core {
  Core(SinkFactory factory, WriterOptions options, WriterEvents events)
      : factory_(std::move(factory)), options_(options), events_(std::move(events)) {}

  void start(const std::shared_ptr<Core>& self);
  void submit_all(std::vector<Item> items);
  bool stop(Clock::time_point deadline, Clock::time_point give_up);
  std::size_t queued() const;

  void run(Sink& sink);
  void write_records(Sink& sink, std::vector<Item>& items);
  tracing::Span trace_write(std::span<Item> items) const;
  // Settles every item, but with `once` (one attempt): then false, with nothing settled,
  // when the write failed (not refused, not unreachable).
  bool write_range(Sink& sink, std::span<Item> items, std::span<pipeline::Record> records,
                   std::vector<Item>& refused, bool once = false);
  bool isolate(Sink& sink, std::span<Item> items, std::span<pipeline::Record> records,
               std::vector<Item>& refused, const std::string& error);
  bool taking_other_records() const;
  void nack_all(std::span<Item> items);
  bool stopping();
  void refuse(const Sink& sink, Item& item, const pipeline::Record& record, std::string detail,
              std::vector<Item>& refused);
  void write_rejects(Sink& sink, std::vector<Item>& items);
  bool sleep_unless_stopping(std::chrono::milliseconds d);

  SinkFactory factory_;
  WriterOptions options_;
  WriterEvents events_;
  mutable std::mutex mutex_;
  std::mutex positions_mutex_;  // a batch carrying a log's position, from asking to written
  std::condition_variable ready_;
  OrderedWriteQueue<Item> queue_{[](const Item& item) { return item.message.group_id(); }};
  bool stopping_ = false;
  std::atomic<bool> healthy_{true};
  // When a batch was last written, by any writer (steady clock, ns).
  std::atomic<std::int64_t> last_written_ns_{0};
  std::vector<std::unique_ptr<Sink>> sinks_;
  std::vector<std::thread> threads_;
  int running_ = 0;  // writer threads not yet finished (under mutex_)
  bool abandoned_ = false;
  std::condition_variable finished_;
  // The sink start() is opening, for interrupt_start() (another thread).
  Mutex opening_mutex_;
  Sink* opening_ SLUICE_GUARDED_BY(opening_mutex_) = nullptr;
  bool start_interrupted_ SLUICE_GUARDED_BY(opening_mutex_) = false;
};

BatchWriter::BatchWriter(SinkFactory factory, WriterOptions options, WriterEvents events)
    : core_(std::make_shared<Core>(std::move(factory), options, std::move(events))) {}

BatchWriter::~BatchWriter() {
  stop();
}

void BatchWriter::start() {
  core_->start(core_);
}
void BatchWriter::interrupt_start() {
  MutexLock lock(core_->opening_mutex_);
  core_->start_interrupted_ = true;
  if (core_->opening_) core_->opening_->interrupt();
}
void BatchWriter::submit(pipeline::Record record, Message message) {
  std::vector<Item> one;
  one.push_back(Item{std::move(record), std::move(message)});
  core_->submit_all(std::move(one));
}
void BatchWriter::submit_reject(RejectRow row, Message message) {
  std::vector<Item> one;
  one.push_back(Item{std::move(row), std::move(message)});
  core_->submit_all(std::move(one));
}
void BatchWriter::submit_all(std::vector<Item> items) {
  core_->submit_all(std::move(items));
}
void BatchWriter::stop() {
  core_->stop(Clock::time_point::max(), Clock::time_point::max());
}
bool BatchWriter::stop(Clock::time_point deadline, Clock::time_point give_up) {
  return core_->stop(deadline, give_up);
}
bool BatchWriter::healthy() const {
  return core_->healthy_.load();
}
std::size_t BatchWriter::queued() const {
  return core_->queued();
}

void BatchWriter::Core::start(const std::shared_ptr<Core>& self) {
  std::vector<std::unique_ptr<Sink>> sinks;
  for (int i = 0; i < options_.writers; ++i) {
    auto sink = factory_();
    {
      MutexLock lock(opening_mutex_);
      if (start_interrupted_) throw SinkError("stopped while the sink was being opened");
      opening_ = sink.get();
    }
    try {
      sink->open();  // fail fast: a wrong DSN is an error at start, not a stream of nacks
    } catch (...) {
      MutexLock lock(opening_mutex_);
      opening_ = nullptr;
      throw;
    }
    {
      MutexLock lock(opening_mutex_);
      opening_ = nullptr;
    }
    sinks.push_back(std::move(sink));
  }
  sinks_ = std::move(sinks);
  running_ = static_cast<int>(sinks_.size());
  // Each thread shares the core: a thread abandoned at the deadline never runs on
  // freed state.
  for (std::size_t i = 0; i < sinks_.size(); ++i)
    threads_.emplace_back([self, s = sinks_[i].get(), i] {
      common::name_this_thread("sluice-write", static_cast<int>(i + 1));
      self->run(*s);
      std::lock_guard lock(self->mutex_);
      --self->running_;
      self->finished_.notify_all();
    });
}

void BatchWriter::Core::submit_all(std::vector<Item> items) {
  if (items.empty()) return;
  bool wake = false;
  {
    std::lock_guard lock(mutex_);
    wake = queue_.push(std::move(items), options_.batch_size);
  }
  if (wake) ready_.notify_one();
}

std::size_t BatchWriter::Core::queued() const {
  std::lock_guard lock(mutex_);
  return queue_.size();
}

bool BatchWriter::Core::stop(Clock::time_point deadline, Clock::time_point give_up) {
  std::unique_lock lock(mutex_);
  if (abandoned_) return false;
  stopping_ = true;
  ready_.notify_all();
  auto done = [&] { return running_ == 0; };
  if (deadline == Clock::time_point::max()) {
    finished_.wait(lock, done);
  } else if (!finished_.wait_until(lock, deadline, done)) {
    spdlog::warn("event=writer_stop_deadline writers_busy={} queued={} action=interrupt", running_,
                 queue_.size());
    for (auto& sink : sinks_) sink->interrupt();
    if (!finished_.wait_until(lock, give_up, done)) {
      for (auto& t : threads_) t.detach();
      threads_.clear();
      abandoned_ = true;
      return false;
    }
  }
  lock.unlock();
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  threads_.clear();
  return true;
}

bool BatchWriter::Core::sleep_unless_stopping(std::chrono::milliseconds d) {
  std::unique_lock lock(mutex_);
  return !ready_.wait_for(lock, d, [&] { return stopping_; });
}

void BatchWriter::Core::run(Sink& sink) {
  for (;;) {
    std::vector<Item> batch;
    std::vector<std::string> groups;  // the ordered groups this batch writes
    {
      std::unique_lock lock(mutex_);
      ready_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping and drained
      // Group commit: wait a little for company, unless the batch is full already.
      const auto deadline = Clock::now() + options_.batch_timeout;
      ready_.wait_until(lock, deadline, [&] {
        return queue_.size() >= options_.batch_size || queue_.has_ordered() || stopping_;
      });
      batch = queue_.take(&sink, sink.atomic_batches(), options_.batch_size, groups);
      if (batch.empty()) {      // all of it is of groups that other writers are writing
        if (stopping_) return;  // those writers take the rest when they are done
        ready_.wait(lock);
        continue;
      }
    }
    std::vector<Item> records, rejects;
    for (auto& item : batch)
      (std::holds_alternative<RejectRow>(item.payload) ? rejects : records)
          .push_back(std::move(item));
    if (!rejects.empty()) write_rejects(sink, rejects);
    if (!records.empty()) write_records(sink, records);
    if (!groups.empty()) {  // settled: the groups' next records may go to any writer
      std::lock_guard lock(mutex_);
      queue_.release(groups);
      ready_.notify_all();
    }
  }
}

namespace {

// A reject row the database refused as given (PostgreSQL's text refuses invalid UTF-8,
// say): its body with every byte outside printable ASCII as \xNN.
std::string escaped(const std::string& body) {
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  out.reserve(body.size());
  for (unsigned char c : body) {
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

}  // namespace

void BatchWriter::Core::write_records(Sink& sink, std::vector<Item>& items) {
  std::vector<pipeline::Record> records;
  records.reserve(items.size());
  for (auto& item : items) {
    records.push_back(std::move(std::get<pipeline::Record>(item.payload)));
    records.back().ordered = item.message.group_id().has_value();
  }
  std::vector<Item> refused;
  write_range(sink, std::span(items), std::span(records), refused);
  if (!refused.empty()) write_rejects(sink, refused);
}

void BatchWriter::Core::refuse(const Sink& sink, Item& item, const pipeline::Record& record,
                               std::string detail, std::vector<Item>& refused) {
  if (events_.outcome) events_.outcome(WriteOutcome::refused, item.message);
  item.message.set_trace_attribute("sluice.record", "rejected");
  item.message.set_trace_attribute("sluice.reject.reason", "sink_refused");
  item.message.set_trace_error("sink_refused", detail);
  spdlog::warn("event=record_refused sink={} message_id={}{} {} reason=sink_refused detail=\"{}\"",
               sink.describe(), record.message_id, trace_field(item.message), record.log_context,
               detail);
  refused.push_back(
      Item{RejectRow{record.message_id, "sink_refused", std::move(detail), item.message.body(),
                     item.message.source(),
                     events_.properties ? events_.properties(item.message) : std::string(),
                     options_.pipeline},
           item.message});
}

tracing::Span BatchWriter::Core::trace_write(std::span<Item> items) const {
  if (!options_.tracer) return {};
  std::vector<tracing::Link> links;
  links.reserve(items.size());
  for (const auto& item : items)
    if (const auto* context = item.message.trace_context()) links.push_back({*context, {}});
  const std::string operation = options_.db_system == "mongodb" ? "insertMany" : "INSERT";
  auto span = options_.tracer->start_linked_span(operation + " " + options_.db_collection,
                                                 tracing::SpanKind::client, std::move(links));
  if (span.recording()) {
    span.set_attribute("db.system.name", options_.db_system);
    span.set_attribute("db.collection.name", options_.db_collection);
    span.set_attribute("db.operation.name", operation);
    span.set_attribute("db.operation.batch.size", static_cast<std::int64_t>(items.size()));
  }
  return span;
}

std::string trace_field(const Message& message) {
  const auto* context = message.trace_context();
  return context ? " trace_id=" + context->trace_id_hex() : std::string();
}

bool BatchWriter::Core::write_range(Sink& sink, std::span<Item> items,
                                    std::span<pipeline::Record> records, std::vector<Item>& refused,
                                    bool once) {
  // A message settled already was released behind one of its group that was not
  // written (or its lease was lost): written now, its row would come before that one's.
  if (std::ranges::any_of(items, [](const Item& item) { return item.message.settled(); })) {
    std::vector<Item> live_items;
    std::vector<pipeline::Record> live_records;
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (items[i].message.settled()) {
        spdlog::debug("event=record_skipped sink={} message_id={}{} reason=settled",
                      sink.describe(), records[i].message_id, trace_field(items[i].message));
        continue;
      }
      live_items.push_back(std::move(items[i]));
      live_records.push_back(std::move(records[i]));
    }
    if (!live_items.empty()) write_range(sink, live_items, live_records, refused);
    return true;  // only ordered groups' messages are settled early: never isolated
  }
  std::chrono::milliseconds backoff = options_.retry_base;
  std::string last_error;
  bool gave_up = false;  // after its attempts (not unreachable, not stopping)
  for (int attempt = 1;; ++attempt) {
    const auto started = Clock::now();
    auto span = trace_write(items);
    try {
      // A log's position goes in the batch's own transaction where the sink can: the
      // rows and how far the log is done are durable together.
      // One such batch at a time: each position then counts the batches committed before
      // it, and the saved position only moves forward.
      const LogPositions logs(sink.positions_with_records() ? std::span<const Item>(items)
                                                            : std::span<const Item>{});
      std::unique_lock<std::mutex> in_turn;
      if (!logs.empty()) in_turn = std::unique_lock(positions_mutex_);
      const auto positions = logs.done_with();
      WriteResult result =
          positions.empty() ? sink.write(records) : sink.write_with_positions(records, positions);
      logs.written(sink, result);
      if (in_turn.owns_lock()) in_turn.unlock();
      span.end();
      if (events_.batch_written) events_.batch_written(records.size(), Clock::now() - started);
      healthy_ = true;
      last_written_ns_ = Clock::now().time_since_epoch().count();
      auto reason = [&](std::size_t i) -> std::string {
        for (auto& [index, why] : result.reasons)
          if (index == i) return std::move(why);
        return "no reason given";
      };
      for (std::size_t i = 0; i < items.size(); ++i) {
        switch (result.outcomes[i]) {
          case WriteOutcome::inserted:
          case WriteOutcome::duplicate:
            if (events_.outcome) events_.outcome(result.outcomes[i], items[i].message);
            if (options_.tracer)
              items[i].message.set_trace_attribute(
                  "sluice.record",
                  result.outcomes[i] == WriteOutcome::inserted ? "inserted" : "duplicate");
            items[i].message.ack();  // written now, or already there: durable either way
            break;
          case WriteOutcome::failed:
            if (items[i].message.receive_count() >= options_.max_record_failures) {
              refuse(sink, items[i], records[i],
                     "failed on " + std::to_string(items[i].message.receive_count()) +
                         " deliveries: " + reason(i),
                     refused);
              break;
            }
            if (events_.outcome) events_.outcome(WriteOutcome::failed, items[i].message);
            spdlog::warn(
                "event=record_write_failed sink={} message_id={}{} {} action=nack error=\"{}\"",
                sink.describe(), records[i].message_id, trace_field(items[i].message),
                records[i].log_context, reason(i));
            items[i].message.nack();
            break;
          case WriteOutcome::refused:
            refuse(sink, items[i], records[i], reason(i), refused);
            break;
        }
      }
      return true;
    } catch (const std::exception& e) {
      const auto* sink_error = dynamic_cast<const SinkError*>(&e);
      const SinkFailure kind = sink_error ? sink_error->kind() : SinkFailure::transient;
      if (span.recording()) {
        span.set_attribute("error.type", std::string(to_string(kind)));
        span.set_error(e.what());
        span.end();
      }
      if (kind == SinkFailure::refused) {
        // Something in here is refused for good: write each half on its own, down to
        // the refused records; the others are written (log2(n) extra round trips per
        // refused record).
        if (records.size() == 1) {
          refuse(sink, items[0], records[0], e.what(), refused);
          return true;
        }
        const std::size_t half = records.size() / 2;
        spdlog::debug("event=batch_refused sink={} records={} action=split error=\"{}\"",
                      sink.describe(), records.size(), e.what());
        write_range(sink, items.first(half), records.first(half), refused);
        write_range(sink, items.subspan(half), records.subspan(half), refused);
        return true;
      }
      healthy_ = false;
      if (events_.batch_failed) events_.batch_failed(e.what());
      // An unreachable database is waited for (the held messages hold the intake back,
      // their visibility extended meanwhile); a transient failure has bounded attempts.
      const bool give_up =
          kind != SinkFailure::unavailable && (once || attempt >= options_.max_attempts);
      // Retries start apart: writers that failed together do not come back together.
      const auto wait = runtime::equal_jitter(backoff, runtime::backoff_random());
      spdlog::warn("event=sink_write_failed sink={} records={} attempt={} kind={} {} error=\"{}\"",
                   sink.describe(), records.size(), attempt, to_string(kind),
                   give_up ? (once ? "action=isolate" : "action=nack")
                           : "retry_in_ms=" + std::to_string(wait.count()),
                   e.what());
      last_error = e.what();
      gave_up = give_up;
      if (give_up || !sleep_unless_stopping(wait)) break;
      backoff = std::min(backoff * 2, options_.retry_max);
    }
  }
  if (once && gave_up) return false;  // the caller decides
  // A batch that keeps failing may fail for one record: one delivered before may be it.
  // Its halves are then written once each, down to that record, so that its batch-mates
  // are written rather than delivered again with it (on a queue with a delivery limit
  // they would spend theirs, and could be dead-lettered for another record's failure).
  // Not for ordered groups: a later record of a group must not be written after an
  // earlier one failed, nor go on without it.
  const auto failed_before = [](const Item& item) { return item.message.receive_count() > 1; };
  const auto grouped = [](const Item& item) { return item.message.group_id().has_value(); };
  const bool stopping_now = stopping();
  if (gave_up && !stopping_now && records.size() > 1 && std::ranges::any_of(items, failed_before) &&
      std::ranges::none_of(items, grouped) && isolate(sink, items, records, refused, last_error))
    return true;
  // Failing on its own: alone in its batch on its max_record_failures-th delivery while
  // the database takes other records (not an outage), it is refused.
  if (gave_up && !stopping_now && records.size() == 1 && !grouped(items[0]) &&
      items[0].message.receive_count() >= options_.max_record_failures && taking_other_records()) {
    refuse(sink, items[0], records[0],
           "failed on " + std::to_string(items[0].message.receive_count()) +
               " deliveries while other records were written: " + last_error,
           refused);
    return true;
  }
  nack_all(items);
  return true;
}

// Not written: nothing is acked; the queue delivers them again after their backoff.
void BatchWriter::Core::nack_all(std::span<Item> items) {
  for (auto& item : items) {
    if (events_.outcome) events_.outcome(WriteOutcome::failed, item.message);
    item.message.nack();
  }
}

bool BatchWriter::Core::stopping() {
  std::lock_guard lock(mutex_);
  return stopping_;
}

// Each half written once; a half that failed while its sibling was written holds the
// failing record: it is split again. Both halves failing is not one record's doing (an
// outage): false, nothing settled, so that the caller nacks them all. A record left
// alone whose sibling was written is refused on its max_record_failures-th delivery
// (the database takes the others), else nacked.
bool BatchWriter::Core::isolate(Sink& sink, std::span<Item> items,
                                std::span<pipeline::Record> records, std::vector<Item>& refused,
                                const std::string& error) {
  if (records.size() == 1) {
    if (items[0].message.receive_count() < options_.max_record_failures) return false;
    refuse(sink, items[0], records[0],
           "failed on " + std::to_string(items[0].message.receive_count()) +
               " deliveries while its batch-mates were written: " + error,
           refused);
    return true;
  }
  const std::size_t half = records.size() / 2;
  spdlog::debug("event=batch_failed_again sink={} records={} action=split error=\"{}\"",
                sink.describe(), records.size(), error);
  const auto first_items = items.first(half), second_items = items.subspan(half);
  const auto first_records = records.first(half), second_records = records.subspan(half);
  const bool first = write_range(sink, first_items, first_records, refused, /*once=*/true);
  const bool second = write_range(sink, second_items, second_records, refused, /*once=*/true);
  if (!first && !second) return false;
  if (!first && !isolate(sink, first_items, first_records, refused, error)) nack_all(first_items);
  if (!second && !isolate(sink, second_items, second_records, refused, error))
    nack_all(second_items);
  return true;
}

// Some batch was written in the last minute: the database takes records.
bool BatchWriter::Core::taking_other_records() const {
  const auto last = last_written_ns_.load();
  return last != 0 && Clock::now().time_since_epoch().count() - last <
                          std::chrono::nanoseconds(std::chrono::minutes(1)).count();
}

void BatchWriter::Core::write_rejects(Sink& sink, std::vector<Item>& items) {
  if (options_.rejects_table) {
    std::vector<RejectRow> rows;
    for (auto& item : items) rows.push_back(std::get<RejectRow>(item.payload));
    try {
      sink.write_rejects(rows);
    } catch (const SinkError& e) {
      if (e.kind() != SinkFailure::refused) {
        spdlog::warn("event=rejects_write_failed sink={} rows={} error=\"{}\"", sink.describe(),
                     rows.size(), e.what());
        for (auto& item : items) item.message.nack();  // keep them: retried later
        return;
      }
      // One row refused as given: each row on its own, its body escaped if need be.
      std::vector<Item> kept;
      for (auto& item : items) {
        auto& row = std::get<RejectRow>(item.payload);
        bool stored = false;
        for (int form = 0; form < 2 && !stored; ++form) {
          if (form == 1) {
            row.body = escaped(row.body);
            row.detail += " (body stored escaped: refused as given)";
          }
          try {
            sink.write_rejects(std::span<const RejectRow>(&row, 1));
            stored = true;
          } catch (const std::exception& again) {
            if (form == 1)
              spdlog::error(
                  "event=rejects_write_failed sink={} message_id={}{} action=nack error=\"{}\"",
                  sink.describe(), row.message_id, trace_field(item.message), again.what());
          }
        }
        if (stored)
          kept.push_back(std::move(item));
        else
          item.message.nack();
      }
      items = std::move(kept);
    } catch (const std::exception& e) {
      spdlog::warn("event=rejects_write_failed sink={} rows={} error=\"{}\"", sink.describe(),
                   rows.size(), e.what());
      for (auto& item : items) item.message.nack();
      return;
    }
  }
  for (auto& item : items) {
    const auto& row = std::get<RejectRow>(item.payload);
    // With a dead-letter queue the container sends it there, then deletes it. Without
    // one, a row in the rejects table is its durable home; with neither, reject()
    // leaves it to the queue's own redrive policy.
    if (options_.dead_letter_queue || !options_.rejects_table)
      item.message.reject(row.reason + ": " + row.detail);
    else
      item.message.ack();
  }
}

}  // namespace sluice::sinks
