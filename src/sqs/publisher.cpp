#include "sluice/sqs/publisher.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <map>
#include <optional>
#include <set>

#include "sluice/aws/error.hpp"
#include "sqs/codec.hpp"
#include "sqs/large_payload.hpp"

namespace sluice::sqs {
namespace asio = boost::asio;
using aws::AwsError;
using aws::ErrorKind;

namespace {
aws::RetryOptions backoff_options(const PublisherOptions& options) {
  aws::RetryOptions retry;
  retry.max_attempts = options.max_attempts;
  retry.base_delay = options.base_delay;
  retry.throttling_base_delay = options.base_delay * 5;
  retry.max_backoff = options.max_delay;
  return retry;
}
}  // namespace

Publisher::Publisher(std::shared_ptr<SqsClient> client, std::string queue_url,
                     PublisherOptions options)
    : client_(std::move(client)),
      queue_url_(std::move(queue_url)),
      options_(options),
      backoff_(backoff_options(options)) {
  if (options_.large_payloads.enabled)
    offloader_ = std::make_shared<PayloadOffloader>(client_, queue_url_, options_.large_payloads);
}

asio::awaitable<void> Publisher::wait(int attempt) {
  asio::steady_timer timer(co_await asio::this_coro::executor, backoff_.backoff(attempt, false));
  auto [ec] = co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
  if (ec) throw AwsError(ErrorKind::cancelled, "publish cancelled during retry backoff");
}

void inject_trace(SendMessageEntry& entry, const tracing::SpanContext& context,
                  PublisherOptions::TraceCarrier carrier) {
  using Carrier = PublisherOptions::TraceCarrier;
  if (carrier == Carrier::none || !context.valid() || !entry.aws_trace_header.empty() ||
      entry.message_attributes.count(std::string(tracing::kTraceparent)))
    return;
  // W3C attributes that would take a message past SQS's 10: the system attribute,
  // which counts against none of them.
  const std::size_t needed = context.trace_state.empty() ? 1 : 2;
  if (carrier == Carrier::aws_trace_header || entry.message_attributes.size() + needed > 10) {
    entry.aws_trace_header = tracing::format_aws_trace_header(context);
    return;
  }
  entry.message_attributes[std::string(tracing::kTraceparent)] =
      MessageAttributeValue::string(tracing::format_traceparent(context));
  if (!context.trace_state.empty())
    entry.message_attributes[std::string(tracing::kTracestate)] =
        MessageAttributeValue::string(context.trace_state);
}

asio::awaitable<SendMessageResult> Publisher::send(SendMessageEntry entry) {
  // Not a coroutine: the caller's thread is the one whose context counts.
  if (const auto* context = tracing::current())
    inject_trace(entry, *context, options_.trace_carrier);
  return send_traced(std::move(entry));
}

asio::awaitable<SendMessageResult> Publisher::send_traced(SendMessageEntry entry) {
  if (offloader_) {
    for (int attempt = 1;; ++attempt) {
      try {
        co_await offloader_->offload(entry);
        break;
      } catch (const AwsError& e) {
        if (!e.retryable() || attempt >= options_.max_attempts) throw;
      }
      co_await wait(attempt);
    }
  }
  for (int attempt = 1;; ++attempt) {
    try {
      co_return co_await client_->send_message(queue_url_, entry);
    } catch (const AwsError& e) {
      if (!e.retryable() || attempt >= options_.max_attempts) throw;
    }
    co_await wait(attempt);
  }
}

std::vector<std::vector<std::size_t>> Publisher::pack(const std::vector<SendMessageEntry>& entries,
                                                      const std::vector<std::size_t>& indexes) {
  std::vector<std::vector<std::size_t>> batches;
  std::size_t batch_bytes = 0;
  for (std::size_t index : indexes) {
    const std::size_t size = codec::message_size(entries[index]);
    if (batches.empty() || batches.back().size() == kMaxBatchEntries ||
        batch_bytes + size > kMaxMessageBytes) {
      batches.emplace_back();
      batch_bytes = 0;
    }
    batches.back().push_back(index);
    batch_bytes += size;
  }
  return batches;
}

asio::awaitable<std::vector<PublishOutcome>> Publisher::send_batch(
    std::vector<SendMessageEntry> entries) {
  if (const auto* context = tracing::current())
    for (auto& entry : entries) inject_trace(entry, *context, options_.trace_carrier);
  return send_batch_traced(std::move(entries));
}

asio::awaitable<std::vector<PublishOutcome>> Publisher::send_batch_traced(
    std::vector<SendMessageEntry> entries) {
  std::vector<PublishOutcome> outcomes(entries.size());
  std::vector<std::size_t> pending;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    outcomes[i].index = i;
    entries[i].id = std::to_string(i);
    try {
      if (offloader_) co_await offloader_->offload(entries[i]);
      codec::validate_send(entries[i], true);
      pending.push_back(i);
    } catch (const AwsError& e) {  // oversized, invalid or not stored: never sent
      if (e.kind() == ErrorKind::cancelled) throw;
      outcomes[i].error_code = e.code();
      outcomes[i].error_message = e.what();
    }
  }
  for (int attempt = 1; !pending.empty(); ++attempt) {
    std::vector<std::size_t> retry;
    for (const auto& batch : pack(entries, pending)) {
      std::vector<SendMessageEntry> request;
      request.reserve(batch.size());
      for (std::size_t index : batch) {
        request.push_back(entries[index]);
        ++outcomes[index].attempts;
      }
      try {
        const BatchResult result = co_await client_->send_message_batch(queue_url_, request);
        // Ids are ours (indexes of this batch's entries), but the answer is input:
        // each id is checked, and counts once.
        std::set<std::size_t> unanswered(batch.begin(), batch.end());
        auto index_of = [&](const std::string& id) -> std::optional<std::size_t> {
          const auto index = codec::entry_index(id, entries.size());
          if (!index || !unanswered.erase(*index)) return std::nullopt;
          return index;
        };
        for (const auto& ok : result.successful) {
          const auto index = index_of(ok.id);
          if (!index) continue;
          outcomes[*index].ok = true;
          outcomes[*index].message_id = ok.message_id;
        }
        for (const auto& failed : result.failed) {
          const auto index = index_of(failed.id);
          if (!index) continue;
          outcomes[*index].error_code = failed.code;
          outcomes[*index].error_message = failed.message;
          if (!failed.sender_fault) retry.push_back(*index);
        }
        for (std::size_t index : unanswered) {  // a malformed answer: try it again
          outcomes[index].error_code = "MissingFromAnswer";
          outcomes[index].error_message = "the SendMessageBatch answer does not mention it";
          retry.push_back(index);
        }
      } catch (const AwsError& e) {
        if (e.kind() == ErrorKind::cancelled) throw;
        for (std::size_t index : batch) {
          outcomes[index].error_code = e.code().empty() ? aws::to_string(e.kind()) : e.code();
          outcomes[index].error_message = e.what();
          if (e.retryable()) retry.push_back(index);
        }
      }
    }
    if (retry.empty() || attempt >= options_.max_attempts) break;
    std::sort(retry.begin(), retry.end());  // keep the input order (FIFO groups)
    pending = std::move(retry);
    co_await wait(attempt);
  }
  co_return outcomes;
}

}  // namespace sluice::sqs
