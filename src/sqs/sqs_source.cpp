// The SQS source of the listener container: receives as long polls (on connections of
// their own), acks as batched
// DeleteMessageBatch calls, retries and releases as batched visibility changes, the
// heartbeat as immediate ChangeMessageVisibilityBatch calls, rejects as a send to the
// dead-letter queue followed by a delete.
#include <cmath>
#include <random>

#include "common/crypto.hpp"
#include "runtime/async_wait.hpp"
#include "runtime/batcher.hpp"
#include "runtime/log_exceptions.hpp"
#include "sluice/aws/error.hpp"
#include "sluice/option_error.hpp"
#include "sluice/spi/source.hpp"
#include "sluice/sqs/source.hpp"
#include "sqs/codec.hpp"
#include "sqs/large_payload.hpp"

namespace sluice {
namespace asio = boost::asio;
using spi::Delivery;
using spi::SourceError;
using spi::SourceErrorKind;

namespace {

constexpr int kMaxSettleAttempts = 5;
constexpr int kMaxVisibilitySeconds = 12 * 3600;

[[noreturn]] void bad_option(const std::string& name, const std::string& value,
                             const std::string& expected) {
  throw OptionError("SQS source", name, value, expected);
}

SourceError source_error(const aws::AwsError& e) {
  SourceErrorKind kind = SourceErrorKind::transient;
  switch (e.kind()) {
    case aws::ErrorKind::cancelled:
      kind = SourceErrorKind::cancelled;
      break;
    case aws::ErrorKind::credentials:
    case aws::ErrorKind::configuration:
      kind = SourceErrorKind::permanent;
      break;
    case aws::ErrorKind::client:  // a missing queue may yet be created: try again
    default:
      kind = SourceErrorKind::transient;
  }
  return SourceError(kind, e.code(), std::string(aws::to_string(e.kind())) + ": " + e.what());
}

std::string random_attempt_id() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  const std::uint64_t a = rng(), b = rng();
  return crypto::hex(reinterpret_cast<const std::uint8_t*>(&a), 8) +
         crypto::hex(reinterpret_cast<const std::uint8_t*>(&b), 8);
}

// SQS visibility is in whole seconds: round a backoff up, within SQS's range.
int visibility_seconds(std::chrono::milliseconds d) {
  const auto ms = std::max<std::int64_t>(0, d.count());
  return static_cast<int>(std::min<std::int64_t>(kMaxVisibilitySeconds, (ms + 999) / 1000));
}

struct DeleteEntry {
  std::string receipt;
  int attempts = 0;
  bool holds_permit = true;     // from ack(); false for the delete after a dead letter
  std::string payload_pointer;  // an S3 object to delete after the message (delete_after_ack)
};
struct VisibilityEntry {
  std::string receipt;
  int seconds = 0;
};

class SqsSource final : public spi::Source {
 public:
  SqsSource(SqsSourceOptions options, spi::SourceContext context)
      : options_(std::move(options)),
        context_(std::move(context)),
        client_(std::make_shared<sqs::SqsClient>(context_.executor, options_.client)),
        settle_client_(std::make_shared<sqs::SqsClient>(context_.executor, options_.client)),
        heartbeat_client_(std::make_shared<sqs::SqsClient>(context_.executor, options_.client)) {
    fifo_ = options_.fifo == FifoMode::on;
    if (options_.large_payloads.enabled) {
      auto payload_options = options_.large_payloads;
      // The payloads' region is the queue's unless set; the endpoint stays S3's own.
      if (payload_options.s3.region.empty()) payload_options.s3.region = client_->region();
      if (!payload_options.s3.credentials)
        payload_options.s3.credentials = options_.client.credentials;
      payloads_ =
          std::make_shared<sqs::PayloadResolver>(context_.executor, std::move(payload_options),
                                                 [this](const std::string& what) { warn(what); });
    }
    // 16 batches in flight to start with; send_deletes adapts it to the round trip.
    const int flushes = kBaseFlushes;
    deletes_ = std::make_shared<runtime::Batcher<DeleteEntry>>(
        context_.executor, static_cast<std::size_t>(options_.delete_batch_size),
        options_.delete_flush_interval,
        [this](std::vector<DeleteEntry> entries) { return send_deletes(std::move(entries)); },
        flushes);
    visibility_changes_ = std::make_shared<runtime::Batcher<VisibilityEntry>>(
        context_.executor, sqs::kMaxBatchEntries, options_.delete_flush_interval,
        [this](std::vector<VisibilityEntry> entries) {
          return send_visibility(std::move(entries));
        },
        flushes);
  }

  asio::awaitable<void> open() override {
    if (options_.fifo == FifoMode::auto_detect) {
      // SQS names every FIFO queue "*.fifo", but a URL can be an alias: the queue's
      // own attribute decides. One attempt; an unreadable queue falls back to the URL
      // (the receives that follow report why, with backoff).
      std::vector<std::string> names;  // not braced inside co_await: GCC 12 mis-compiles it
      names.emplace_back("FifoQueue");
      try {
        auto attributes = co_await client_->get_queue_attributes(options_.queue_url, names);
        auto it = attributes.find("FifoQueue");
        fifo_ = it != attributes.end() && it->second == "true";
      } catch (const aws::AwsError& e) {
        if (e.kind() == aws::ErrorKind::cancelled) throw source_error(e);
        fifo_ = options_.queue_url.ends_with(".fifo");
        warn("cannot read the queue's FifoQueue attribute (" + std::string(e.what()) +
             "); FIFO from its URL: " + (fifo_ ? "yes" : "no"));
      }
    }
    // A FIFO group stays blocked until its message is deleted: send deletes at once.
    deletes_->set_eager(fifo_);
    deletes_->start();
    visibility_changes_->start();
  }

  spi::SourceCapabilities capabilities() const override {
    spi::SourceCapabilities c;
    c.extendable = true;
    c.lease = options_.visibility_timeout;
    c.ordered_groups = fifo_;
    c.max_batch = options_.max_messages_per_poll;
    c.confirms_acks = true;
    c.blocking_prepare = payloads_ != nullptr;
    return c;
  }

  asio::awaitable<std::vector<Delivery>> receive(int max) override {
    sqs::ReceiveMessageRequest request;
    request.queue_url = options_.queue_url;
    request.max_messages = std::min(max, options_.max_messages_per_poll);
    request.wait_time_seconds = static_cast<int>(options_.poll_wait.count());
    request.visibility_timeout = static_cast<int>(options_.visibility_timeout.count());
    if (fifo_) request.receive_request_attempt_id = random_attempt_id();
    struct Received {
      std::vector<Delivery> states;
      std::chrono::system_clock::time_point at;
      std::chrono::steady_clock::time_point visible_until;
    } received;
    received.states.reserve(static_cast<std::size_t>(request.max_messages));
    // Straight from the answer into each held message: its text in one block, its body
    // in one string, nothing else copied. (Two pointers captured: no allocation.)
    std::function<void(const sqs::MessageView&)> hold = [this,
                                                         &received](const sqs::MessageView& m) {
      if (received.states.empty()) {  // the lease runs from the answer
        received.at = std::chrono::system_clock::now();
        received.visible_until = std::chrono::steady_clock::now() + options_.visibility_timeout;
      }
      delivery_.clear();  // nothing left by a message that threw half-way
      delivery_.id(m.message_id).receipt(m.receipt_handle);
      // Standard queues may carry a MessageGroupId too (fair queues): it orders
      // nothing there, so only a FIFO queue's messages are put in groups.
      if (fifo_)
        if (auto group = m.attribute("MessageGroupId")) delivery_.group(*group);
      for (const auto& [name, value] : m.attributes) delivery_.attribute(name, value);
      for (const auto& [name, value] : m.message_attributes)
        delivery_.header(name, value.is_binary() ? crypto::base64_encode(value.binary_value)
                                                 : value.string_value);
      auto s = delivery_.body(std::string(m.body))
                   .receive_count(std::max(1, m.receive_count()))
                   .received_at(received.at)
                   .lease_until(received.visible_until)
                   .build();
      received.states.push_back(std::move(s));
    };
    try {
      receive_requests_.fetch_add(1, std::memory_order_relaxed);
      report_requests();
      co_await client_->receive_message(std::move(request), std::move(hold));
    } catch (const aws::AwsError& e) {
      throw source_error(e);
    }
    co_return std::move(received.states);
  }

  // S3 payloads are fetched on the worker, while the core holds the messages (and
  // extends their visibility): a wait for room in the byte budget never costs a
  // redelivery.
  void stop_preparing() override {
    if (payloads_) payloads_->interrupt();
  }

  void prepare(std::span<const Delivery> unit) override {
    if (!payloads_) return;
    payloads_->prepare(unit);
    report_payloads();
  }

  void ack(const Delivery& state) override {
    DeleteEntry entry{std::string(spi::receipt_of(state)), 0, true, {}};
    if (payloads_ && payloads_->delete_after_ack())
      entry.payload_pointer = spi::queue_body_of(state);
    deletes_->add(std::move(entry));
  }
  void expedite_acks() override { deletes_->flush_now(); }

  void retry(const Delivery& state, std::chrono::milliseconds backoff) override {
    visibility_changes_->add({std::string(spi::receipt_of(state)), visibility_seconds(backoff)});
  }

  void release(const Delivery& state) override {
    visibility_changes_->add({std::string(spi::receipt_of(state)), 0});
  }

  asio::awaitable<bool> reject(Delivery state, std::string reason) override {
    if (options_.dead_letter_queue_url.empty()) {
      // No destination of ours: hidden as long as SQS allows, so that the queue's own
      // redrive policy (maxReceiveCount) moves it to its dead-letter queue.
      visibility_changes_->add({std::string(spi::receipt_of(state)), kMaxVisibilitySeconds});
      co_return false;
    }
    sqs::SendMessageEntry entry;
    // A resolved payload goes back as the pointer it came as (its object is kept).
    entry.body =
        spi::queue_body_of(state).empty() ? spi::body_of(state) : spi::queue_body_of(state);
    entry.message_attributes["sluice-reject-reason"] =
        sqs::MessageAttributeValue::string(reason.empty() ? "rejected" : reason.substr(0, 4096));
    entry.message_attributes["sluice-source-queue"] =
        sqs::MessageAttributeValue::string(options_.queue_url);
    entry.message_attributes["sluice-message-id"] =
        sqs::MessageAttributeValue::string(std::string(spi::id_of(state)));
    // A pointer keeps its size attribute whatever else does not fit: without it the
    // dead letter would read as an ordinary body after a redrive.
    for (auto name : {sqs::kPayloadSizeAttribute, sqs::kLegacyPayloadSizeAttribute})
      if (auto value = spi::header_of(state, name))
        entry.message_attributes.emplace(name,
                                         sqs::MessageAttributeValue::number(std::string(*value)));
    spi::for_each_header(state, [&](std::string_view name, std::string_view value) {
      if (entry.message_attributes.size() < 10 && !value.empty())
        entry.message_attributes.emplace(name,
                                         sqs::MessageAttributeValue::string(std::string(value)));
    });
    if (options_.dead_letter_queue_url.ends_with(".fifo")) {
      entry.message_group_id = spi::group_of(state).value_or("dead-letter");
      entry.message_deduplication_id = spi::id_of(state);
    }
    try {
      co_await settle_client_->send_message(options_.dead_letter_queue_url, std::move(entry));
    } catch (const aws::AwsError& e) {
      throw source_error(e);
    }
    // Only once the dead letter is safe. Its permit came back with the reject.
    deletes_->add({std::string(spi::receipt_of(state)), 0, false, {}});
    co_return true;
  }

  // Chunks of 10 go out concurrently, on the heartbeat's own client.
  asio::awaitable<std::size_t> extend(std::vector<Delivery> states) override {
    const int seconds = static_cast<int>(options_.visibility_timeout.count());
    auto shared = std::make_shared<std::vector<Delivery>>(std::move(states));
    auto extended = std::make_shared<std::size_t>(0);
    std::vector<asio::awaitable<void>> chunks;
    for (std::size_t start = 0; start < shared->size(); start += sqs::kMaxBatchEntries)
      chunks.push_back(extend_chunk(shared, start,
                                    std::min(shared->size(), start + sqs::kMaxBatchEntries),
                                    seconds, extended));
    // extend_chunk lets only a cancellation out.
    for (const auto& error : co_await runtime::run_all(context_.executor, std::move(chunks)))
      if (error) throw spi::SourceError(spi::SourceErrorKind::cancelled, "", "heartbeat cancelled");
    co_return *extended;
  }

  // Adds how many it extended to `extended`.
  asio::awaitable<void> extend_chunk(std::shared_ptr<std::vector<Delivery>> states,
                                     std::size_t start, std::size_t end, int seconds,
                                     std::shared_ptr<std::size_t> extended) {
    std::vector<sqs::ChangeVisibilityEntry> entries;
    for (std::size_t i = start; i < end; ++i)
      entries.push_back({std::to_string(i), std::string(spi::receipt_of((*states)[i])), seconds});
    try {
      visibility_requests_.fetch_add(1, std::memory_order_relaxed);
      const auto result =
          co_await heartbeat_client_->change_message_visibility_batch(options_.queue_url, entries);
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
      for (const auto& ok : result.successful)
        if (auto i = sqs::codec::entry_index(ok.id, end); i && *i >= start) {
          spi::set_lease_until((*states)[*i], until);
          ++*extended;
        }
    } catch (const aws::AwsError& e) {
      if (e.kind() == aws::ErrorKind::cancelled) throw source_error(e);
      warn("visibility heartbeat failed: " + std::string(e.what()));
    } catch (...) {  // anything else: this round failed, the heartbeat goes on
      warn("visibility heartbeat failed: " + runtime::describe_current_exception());
    }
  }

  asio::awaitable<void> flush() override {
    co_await visibility_changes_->drain();
    co_await deletes_->drain();
    if (payloads_) co_await payloads_->wait_for_deletes(std::chrono::seconds(5));
    report_requests();
  }

  std::string describe() const override { return options_.queue_url; }
  std::string message_source() const override { return options_.queue_url; }
  std::string messaging_system() const override { return "aws_sqs"; }
  std::string destination_name() const override {  // the URL's last segment
    const auto slash = options_.queue_url.find_last_of('/');
    return slash == std::string::npos ? options_.queue_url : options_.queue_url.substr(slash + 1);
  }

 private:
  void warn(const std::string& what) {
    if (context_.warning) context_.warning(what);
  }

  // Deletes in flight at once follow the round trip: 16 batches up to 20 ms (more only
  // cost connections and CPU on a near server), in proportion beyond (16 batches of 10
  // at 50 ms would cap any drain at 3,200 messages/s), at most every held message in a
  // batch and what the settlement client's pool holds.
  void adapt_flushes(std::chrono::steady_clock::duration round_trip) {
    const double ms = std::chrono::duration<double, std::milli>(round_trip).count();
    delete_round_trip_ms_ = delete_round_trip_ms_ < 0 ? ms : delete_round_trip_ms_ * 0.9 + ms * 0.1;
    const int most =
        std::max(kBaseFlushes,
                 std::min(context_.max_in_flight / std::max(1, options_.delete_batch_size),
                          static_cast<int>(options_.client.http.max_connections_per_endpoint)));
    const int wanted =
        std::clamp(static_cast<int>(std::ceil(kBaseFlushes * delete_round_trip_ms_ / 20.0)),
                   kBaseFlushes, most);
    if (wanted == flushes_now_) return;
    flushes_now_ = wanted;
    deletes_->set_max_concurrent_flushes(wanted);
    visibility_changes_->set_max_concurrent_flushes(wanted);
  }

  asio::awaitable<void> send_deletes(std::vector<DeleteEntry> entries) {
    std::vector<sqs::DeleteMessageEntry> request;
    request.reserve(entries.size());
    for (std::size_t i = 0; i < entries.size(); ++i)
      request.push_back({std::to_string(i), entries[i].receipt});
    std::size_t confirmed = 0, abandoned = 0, from_ack = 0;
    std::vector<sqs::PayloadPointer> objects;  // of the messages now deleted
    auto give_up = [&](const DeleteEntry& entry, const std::string& why) {
      warn("delete abandoned (" + why + "); the message will be delivered again");
      ++abandoned;
      from_ack += entry.holds_permit;
    };
    try {
      const auto sent_at = std::chrono::steady_clock::now();
      delete_requests_.fetch_add(1, std::memory_order_relaxed);
      const auto result =
          co_await settle_client_->delete_message_batch(options_.queue_url, std::move(request));
      adapt_flushes(std::chrono::steady_clock::now() - sent_at);
      std::vector<bool> answered(entries.size(), false);
      for (const auto& ok : result.successful)
        if (auto i = sqs::codec::entry_index(ok.id, entries.size()); i && !answered[*i]) {
          answered[*i] = true;
          ++confirmed;
          from_ack += entries[*i].holds_permit;
          if (!entries[*i].payload_pointer.empty())
            if (auto pointer = sqs::parse_payload_pointer(entries[*i].payload_pointer))
              objects.push_back(std::move(*pointer));
        }
      for (const auto& f : result.failed) {
        auto i = sqs::codec::entry_index(f.id, entries.size());
        if (!i || answered[*i]) continue;
        answered[*i] = true;
        auto& entry = entries[*i];
        if (!f.sender_fault && ++entry.attempts < kMaxSettleAttempts)
          deletes_->add(entry);
        else
          give_up(entry, f.code + ": " + f.message);
      }
      // An entry the answer does not mention (a malformed reply): not confirmed.
      for (std::size_t i = 0; i < entries.size(); ++i)
        if (!answered[i]) give_up(entries[i], "not in the DeleteMessageBatch answer");
    } catch (...) {
      // The whole call failed after the client's own retries (or threw something
      // else): keep the deletes for later (the queue may be back), within a bound.
      const std::string what = runtime::describe_current_exception();
      for (auto& entry : entries) {
        if (++entry.attempts < kMaxSettleAttempts)
          deletes_->add(entry);
        else
          give_up(entry, "after " + std::to_string(kMaxSettleAttempts) + " attempts: " + what);
      }
    }
    if (context_.acks_settled && confirmed + abandoned > 0)
      context_.acks_settled(confirmed, abandoned, from_ack);
    if (!objects.empty()) payloads_->delete_objects(std::move(objects));
    if (payloads_) report_payloads();  // bytes held fall as messages are deleted
  }

  // The calls that make most of the bill: ReceiveMessage, DeleteMessageBatch and
  // ChangeMessageVisibilityBatch, one each (retries of a call by the client, dead
  // letters and queue-attribute reads are not counted here), as running totals:
  // reported with each receive.
  void report_requests() {
    if (!context_.gauge) return;
    context_.gauge("sqs_receive_requests",
                   static_cast<double>(receive_requests_.load(std::memory_order_relaxed)));
    context_.gauge("sqs_delete_requests",
                   static_cast<double>(delete_requests_.load(std::memory_order_relaxed)));
    context_.gauge("sqs_change_visibility_requests",
                   static_cast<double>(visibility_requests_.load(std::memory_order_relaxed)));
  }

  void report_payloads() {
    if (!context_.gauge) return;
    const auto s = payloads_->stats();
    context_.gauge("large_payload_bytes_held", static_cast<double>(payloads_->bytes_held()));
    context_.gauge("large_payloads_fetched", static_cast<double>(s.fetched));
    context_.gauge("large_payload_bytes_fetched", static_cast<double>(s.fetched_bytes));
    context_.gauge("large_payloads_missing", static_cast<double>(s.missing));
    context_.gauge("large_payload_fetch_failures", static_cast<double>(s.failed));
    context_.gauge("large_payload_waits", static_cast<double>(s.waits));
    context_.gauge("large_payloads_deleted", static_cast<double>(s.deleted));
  }

  asio::awaitable<void> send_visibility(std::vector<VisibilityEntry> entries) {
    std::vector<sqs::ChangeVisibilityEntry> request;
    request.reserve(entries.size());
    for (std::size_t i = 0; i < entries.size(); ++i)
      request.push_back({std::to_string(i), entries[i].receipt, entries[i].seconds});
    try {
      visibility_requests_.fetch_add(1, std::memory_order_relaxed);
      const auto result = co_await settle_client_->change_message_visibility_batch(
          options_.queue_url, std::move(request));
      for (const auto& f : result.failed)
        warn("visibility change failed (" + f.code + "): " + f.message);
    } catch (const aws::AwsError& e) {
      warn("visibility change batch failed: " + std::string(e.what()));
    }
  }

  SqsSourceOptions options_;
  std::atomic<std::uint64_t> receive_requests_{0}, delete_requests_{0}, visibility_requests_{0};
  // Receives run on the I/O thread and build a message's text without suspending: one
  // builder serves them all, its buffers warm.
  spi::DeliveryBuilder delivery_;
  spi::SourceContext context_;
  // Three clients, so three connection pools: long polls hold a connection for up to
  // poll_wait; deletes, visibility changes and dead letters come in bursts; the
  // heartbeat must never wait behind either (a heartbeat or a delete that waits past
  // the visibility timeout means a redelivery).
  std::shared_ptr<sqs::SqsClient> client_;
  std::shared_ptr<sqs::SqsClient> settle_client_;
  std::shared_ptr<sqs::SqsClient> heartbeat_client_;
  bool fifo_ = false;
  static constexpr int kBaseFlushes = 16;
  double delete_round_trip_ms_ = -1;  // a moving mean (the I/O thread's)
  int flushes_now_ = kBaseFlushes;
  std::shared_ptr<runtime::Batcher<DeleteEntry>> deletes_;
  std::shared_ptr<runtime::Batcher<VisibilityEntry>> visibility_changes_;
  std::shared_ptr<sqs::PayloadResolver> payloads_;  // with large_payloads.enabled
};

std::string str(std::chrono::milliseconds d) {
  return std::to_string(d.count()) + " ms";
}

}  // namespace

void validate(const SqsSourceOptions& o) {
  if (o.queue_url.empty()) bad_option("queue_url", "(empty)", "an SQS queue URL");
  if (o.max_messages_per_poll < 1 || o.max_messages_per_poll > 10)
    bad_option("max_messages_per_poll", std::to_string(o.max_messages_per_poll),
               "1..10 (the SQS limit)");
  if (o.poll_wait < std::chrono::seconds(0) || o.poll_wait > std::chrono::seconds(20))
    bad_option("poll_wait", str(o.poll_wait), "0..20 s (the SQS long-poll limit)");
  if (o.visibility_timeout < std::chrono::seconds(1) ||
      o.visibility_timeout > std::chrono::seconds(kMaxVisibilitySeconds))
    bad_option("visibility_timeout", str(o.visibility_timeout), "1 s..12 h (the SQS limit)");
  if (o.delete_batch_size < 1 || o.delete_batch_size > 10)
    bad_option("delete_batch_size", std::to_string(o.delete_batch_size),
               "1..10 (the SQS batch limit)");
  if (o.delete_flush_interval <= std::chrono::milliseconds(0))
    bad_option("delete_flush_interval", str(o.delete_flush_interval), "more than 0");
  if (o.large_payloads.enabled && o.large_payloads.max_bytes_in_flight == 0)
    bad_option("large_payloads.max_bytes_in_flight", "0", "at least 1 byte");
}

SourceFactory make_sqs_source(SqsSourceOptions options) {
  validate(options);
  return [options = std::move(options)](const spi::SourceContext& context) {
    try {
      return std::unique_ptr<spi::Source>(std::make_unique<SqsSource>(options, context));
    } catch (const aws::AwsError& e) {
      throw source_error(e);  // no region, a malformed endpoint: configuration
    }
  };
}

}  // namespace sluice
