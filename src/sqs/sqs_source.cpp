#include "sqs/sqs_source.hpp"

#include <random>

#include "aws/crypto.hpp"
#include "runtime/batcher.hpp"
#include "sluice/aws/error.hpp"

namespace sluice::sqs {
namespace asio = boost::asio;
using runtime::StatePtr;

namespace {

struct DeleteEntry {
  std::string receipt;
  int attempts = 0;
};
struct VisibilityEntry {
  std::string receipt;
  int seconds = 0;
};

constexpr int kMaxSettleAttempts = 5;

std::string random_attempt_id() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  const std::uint64_t a = rng(), b = rng();
  return crypto::hex(reinterpret_cast<const std::uint8_t*>(&a), 8) +
         crypto::hex(reinterpret_cast<const std::uint8_t*>(&b), 8);
}

class SqsSource final : public runtime::Source {
 public:
  SqsSource(asio::any_io_executor executor, SqsSourceOptions source,
            const ContainerOptions& options, runtime::SourceEvents events, bool fifo)
      : executor_(executor),
        client_(std::make_shared<SqsClient>(executor, source.client)),
        queue_url_(std::move(source.queue_url)),
        dead_letter_url_(options.dead_letter_queue_url),
        max_per_poll_(options.max_messages_per_poll),
        poll_wait_(options.poll_wait),
        visibility_(options.visibility_timeout),
        events_(std::move(events)),
        fifo_(fifo) {
    const auto batch = static_cast<std::size_t>(options.delete_batch_size);
    deletes_ = std::make_shared<runtime::Batcher<DeleteEntry>>(
        executor, batch, options.delete_flush_interval,
        [this](std::vector<DeleteEntry> entries) { return send_deletes(std::move(entries)); });
    visibility_changes_ = std::make_shared<runtime::Batcher<VisibilityEntry>>(
        executor, kMaxBatchEntries, options.delete_flush_interval,
        [this](std::vector<VisibilityEntry> entries) {
          return send_visibility(std::move(entries));
        });
  }

  asio::awaitable<std::vector<StatePtr>> receive(int max) override {
    ReceiveMessageRequest request;
    request.queue_url = queue_url_;
    request.max_messages = std::min(max, max_per_poll_);
    request.wait_time_seconds = static_cast<int>(poll_wait_.count());
    request.visibility_timeout = static_cast<int>(visibility_.count());
    if (fifo_) request.receive_request_attempt_id = random_attempt_id();
    auto messages = co_await client_->receive_message(std::move(request));
    const auto now = std::chrono::system_clock::now();
    const std::int64_t visible_until = detail::steady_now_ms() + visibility_.count() * 1000;
    std::vector<StatePtr> states;
    states.reserve(messages.size());
    for (auto& m : messages) {
      auto s = std::make_shared<detail::MessageState>();
      s->id = std::move(m.message_id);
      s->body = std::move(m.body);
      s->source = queue_url_;
      s->receipt = std::move(m.receipt_handle);
      s->receive_count = std::max(1, m.receive_count());
      s->group_id = m.group_id();
      s->received_at = now;
      s->visible_until_ms = visible_until;
      for (auto& [name, value] : m.message_attributes)
        s->headers.emplace(name, value.is_binary() ? crypto::base64_encode(value.binary_value)
                                                   : std::move(value.string_value));
      s->attributes = std::move(m.attributes);
      states.push_back(std::move(s));
    }
    co_return states;
  }

  void ack(const StatePtr& state) override { deletes_->add({state->receipt, 0}); }

  void change_visibility(const StatePtr& state, std::chrono::seconds visibility) override {
    visibility_changes_->add({state->receipt, static_cast<int>(visibility.count())});
  }

  asio::awaitable<std::size_t> extend(std::vector<StatePtr> states,
                                      std::chrono::seconds visibility) override {
    std::size_t extended = 0;
    for (std::size_t start = 0; start < states.size(); start += kMaxBatchEntries) {
      std::vector<ChangeVisibilityEntry> entries;
      const std::size_t end = std::min(states.size(), start + kMaxBatchEntries);
      for (std::size_t i = start; i < end; ++i)
        entries.push_back(
            {std::to_string(i), states[i]->receipt, static_cast<int>(visibility.count())});
      try {
        const auto result = co_await client_->change_message_visibility_batch(queue_url_, entries);
        const std::int64_t until = detail::steady_now_ms() + visibility.count() * 1000;
        for (const auto& ok : result.successful)
          states[std::stoul(ok.id)]->visible_until_ms = until;
        extended += result.successful.size();
      } catch (const aws::AwsError& e) {
        if (e.kind() == aws::ErrorKind::cancelled) throw;
        warn("visibility heartbeat failed: " + std::string(e.what()));
      }
    }
    co_return extended;
  }

  bool has_dead_letter() const override { return !dead_letter_url_.empty(); }

  asio::awaitable<void> dead_letter(StatePtr state, std::string reason) override {
    SendMessageEntry entry;
    entry.body = state->body;
    entry.message_attributes["sluice-reject-reason"] =
        MessageAttributeValue::string(reason.empty() ? "rejected" : reason.substr(0, 4096));
    entry.message_attributes["sluice-source-queue"] = MessageAttributeValue::string(queue_url_);
    entry.message_attributes["sluice-message-id"] = MessageAttributeValue::string(state->id);
    for (const auto& [name, value] : state->headers) {
      if (entry.message_attributes.size() >= 10) break;
      if (!value.empty())
        entry.message_attributes.emplace(name, MessageAttributeValue::string(value));
    }
    if (dead_letter_url_.ends_with(".fifo")) {
      entry.message_group_id = state->group_id.value_or("dead-letter");
      entry.message_deduplication_id = state->id;
    }
    co_await client_->send_message(dead_letter_url_, std::move(entry));
  }

  bool fifo() const override { return fifo_; }

  void start() override {
    deletes_->start();
    visibility_changes_->start();
  }

  asio::awaitable<void> flush() override {
    co_await visibility_changes_->drain();
    co_await deletes_->drain();
  }

  std::string describe() const override { return queue_url_; }

 private:
  void warn(const std::string& what) {
    if (events_.warning) events_.warning(what);
  }

  asio::awaitable<void> send_deletes(std::vector<DeleteEntry> entries) {
    std::vector<DeleteMessageEntry> request;
    request.reserve(entries.size());
    for (std::size_t i = 0; i < entries.size(); ++i)
      request.push_back({std::to_string(i), entries[i].receipt});
    try {
      const auto result = co_await client_->delete_message_batch(queue_url_, request);
      if (events_.acked && !result.successful.empty()) events_.acked(result.successful.size());
      for (const auto& f : result.failed) {
        auto& entry = entries[std::stoul(f.id)];
        if (!f.sender_fault && ++entry.attempts < kMaxSettleAttempts) {
          deletes_->add(entry);
        } else {
          warn("delete failed (" + f.code + ": " + f.message +
               "); the message will be delivered again");
        }
      }
    } catch (const aws::AwsError& e) {
      // The whole call failed after the client's own retries: keep the deletes for
      // later (the queue may be back), within a bound.
      for (auto& entry : entries) {
        if (++entry.attempts < kMaxSettleAttempts)
          deletes_->add(entry);
        else
          warn("delete abandoned after " + std::to_string(kMaxSettleAttempts) +
               " attempts: " + e.what() + "; the message will be delivered again");
      }
    }
  }

  asio::awaitable<void> send_visibility(std::vector<VisibilityEntry> entries) {
    std::vector<ChangeVisibilityEntry> request;
    for (std::size_t i = 0; i < entries.size(); ++i)
      request.push_back({std::to_string(i), entries[i].receipt, entries[i].seconds});
    try {
      const auto result = co_await client_->change_message_visibility_batch(queue_url_, request);
      for (const auto& f : result.failed)
        warn("visibility change failed (" + f.code + "): " + f.message);
    } catch (const aws::AwsError& e) {
      warn("visibility change batch failed: " + std::string(e.what()));
    }
  }

  asio::any_io_executor executor_;
  std::shared_ptr<SqsClient> client_;
  std::string queue_url_;
  std::string dead_letter_url_;
  int max_per_poll_;
  std::chrono::seconds poll_wait_;
  std::chrono::seconds visibility_;
  runtime::SourceEvents events_;
  bool fifo_;
  std::shared_ptr<runtime::Batcher<DeleteEntry>> deletes_;
  std::shared_ptr<runtime::Batcher<VisibilityEntry>> visibility_changes_;
};

}  // namespace

std::unique_ptr<runtime::Source> make_sqs_source(asio::any_io_executor executor,
                                                 SqsSourceOptions source,
                                                 const ContainerOptions& options,
                                                 runtime::SourceEvents events, bool fifo) {
  return std::make_unique<SqsSource>(std::move(executor), std::move(source), options,
                                     std::move(events), fifo);
}

}  // namespace sluice::sqs
