#include "sinks/writer.hpp"

#include <spdlog/spdlog.h>

namespace sluice::sinks {
using Clock = std::chrono::steady_clock;

BatchWriter::BatchWriter(SinkFactory factory, WriterOptions options, WriterEvents events)
    : factory_(std::move(factory)), options_(options), events_(std::move(events)) {}

BatchWriter::~BatchWriter() {
  stop();
}

void BatchWriter::start() {
  std::vector<std::unique_ptr<Sink>> sinks;
  for (int i = 0; i < options_.writers; ++i) {
    auto sink = factory_();
    sink->open();  // fail fast: a wrong DSN is an error at start, not a stream of nacks
    sinks.push_back(std::move(sink));
  }
  for (auto& sink : sinks)
    threads_.emplace_back([this, s = std::move(sink)]() mutable { run(std::move(s)); });
}

void BatchWriter::submit(pipeline::Record record, Message message) {
  enqueue(Item{std::move(record), std::move(message)});
}

void BatchWriter::submit_reject(RejectRow row, Message message) {
  enqueue(Item{std::move(row), std::move(message)});
}

void BatchWriter::enqueue(Item item) {
  std::vector<Item> one;
  one.push_back(std::move(item));
  submit_all(std::move(one));
}

void BatchWriter::submit_all(std::vector<Item> items) {
  if (items.empty()) return;
  bool wake = false;
  {
    std::lock_guard lock(mutex_);
    const std::size_t before = queue_.size();
    for (auto& item : items) {
      const bool ordered = item.message.group_id().has_value();
      ordered_queued_ += ordered;
      queue_.push_back({std::move(item), ordered});
    }
    // Wake a writer when a batch can start (its timer begins), is full, or holds an
    // ordered record; waking it for every record would cost a context switch per message.
    wake = before == 0 || ordered_queued_ > 0 ||
           queue_.size() / options_.batch_size > before / options_.batch_size;
  }
  if (wake) ready_.notify_one();
}

std::size_t BatchWriter::queued() const {
  std::lock_guard lock(mutex_);
  return queue_.size();
}

void BatchWriter::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  ready_.notify_all();
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  threads_.clear();
}

bool BatchWriter::sleep_unless_stopping(std::chrono::milliseconds d) {
  std::unique_lock lock(mutex_);
  return !ready_.wait_for(lock, d, [&] { return stopping_; });
}

void BatchWriter::run(std::unique_ptr<Sink> sink) {
  for (;;) {
    std::vector<Item> batch;
    {
      std::unique_lock lock(mutex_);
      ready_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping and drained
      // Group commit: wait a little for company, unless the batch is full already.
      const auto deadline = Clock::now() + options_.batch_timeout;
      ready_.wait_until(lock, deadline, [&] {
        return queue_.size() >= options_.batch_size || ordered_queued_ > 0 || stopping_;
      });
      const std::size_t n = std::min(options_.batch_size, queue_.size());
      batch.reserve(n);
      for (std::size_t i = 0; i < n; ++i) {
        ordered_queued_ -= queue_.front().ordered;
        batch.push_back(std::move(queue_.front().item));
        queue_.pop_front();
      }
    }
    std::vector<Item> records, rejects;
    for (auto& item : batch)
      (std::holds_alternative<RejectRow>(item.payload) ? rejects : records)
          .push_back(std::move(item));
    if (!rejects.empty()) write_rejects(*sink, rejects);
    if (!records.empty()) write_records(*sink, records);
  }
}

void BatchWriter::write_records(Sink& sink, std::vector<Item>& items) {
  std::vector<pipeline::Record> records;
  records.reserve(items.size());
  for (auto& item : items) records.push_back(std::move(std::get<pipeline::Record>(item.payload)));
  std::chrono::milliseconds backoff = options_.retry_base;
  for (int attempt = 1;; ++attempt) {
    const auto started = Clock::now();
    try {
      const std::vector<WriteOutcome> outcomes = sink.write(records);
      if (events_.batch_written) events_.batch_written(records.size(), Clock::now() - started);
      healthy_ = true;
      for (std::size_t i = 0; i < items.size(); ++i) {
        if (events_.outcome) events_.outcome(outcomes[i]);
        if (outcomes[i] == WriteOutcome::failed) {
          spdlog::warn("event=record_write_failed sink={} message_id={} {} action=nack",
                       sink.describe(), records[i].message_id, records[i].log_context);
          items[i].message.nack();
        } else
          items[i].message.ack();  // written now, or already there: durable either way
      }
      return;
    } catch (const std::exception& e) {
      healthy_ = false;
      if (events_.batch_failed) events_.batch_failed(e.what());
      // An unreachable database is waited for (the held messages hold the intake back,
      // their visibility extended meanwhile); any other failure has bounded attempts.
      const auto* sink_error = dynamic_cast<const SinkError*>(&e);
      const bool unavailable = sink_error && sink_error->unavailable();
      const bool give_up = !unavailable && attempt >= options_.max_attempts;
      spdlog::warn("event=sink_write_failed sink={} records={} attempt={} {} error=\"{}\"",
                   sink.describe(), records.size(), attempt,
                   give_up ? "action=nack" : "retry_in_ms=" + std::to_string(backoff.count()),
                   e.what());
      if (give_up || !sleep_unless_stopping(backoff)) break;
      backoff = std::min(backoff * 2, options_.retry_max);
    }
  }
  // Not written: nothing is acked; the queue delivers them again after their backoff.
  for (auto& item : items) item.message.nack();
}

void BatchWriter::write_rejects(Sink& sink, std::vector<Item>& items) {
  if (options_.rejects_table) {
    std::vector<RejectRow> rows;
    for (auto& item : items) rows.push_back(std::get<RejectRow>(item.payload));
    try {
      sink.write_rejects(rows);
    } catch (const std::exception& e) {
      spdlog::warn("event=rejects_write_failed sink={} rows={} error=\"{}\"", sink.describe(),
                   rows.size(), e.what());
      for (auto& item : items) item.message.nack();  // keep them: retried later
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
