// `sluice publish` to SQS or SNS (sqs/publish_verb.hpp).
#include "sqs/publish_verb.hpp"

#include <unistd.h>

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/channel.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <functional>
#include <iostream>
#include <utility>
#include <vector>

#include "sluice/aws/http.hpp"
#include "sluice/s3/client.hpp"
#include "sluice/sns/client.hpp"
#include "sluice/sqs/client.hpp"
#include "sluice/sqs/publisher.hpp"
#include "sqs/group_ids.hpp"
#include "sqs/verbs.hpp"

namespace sluice::sqs {
namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

namespace {

using ChunkResult = std::pair<std::size_t, std::size_t>;  // sent, failed
// Sends bodies[first, first + n) as one unit of work.
using SendChunk =
    std::function<asio::awaitable<ChunkResult>(std::vector<std::string> bodies, std::size_t first)>;

// Chunks of `chunk_size` bodies, `concurrency` chunks in flight, with progress.
asio::awaitable<ChunkResult> publish_chunks(const driver::PublishRequest& options,
                                            std::vector<std::string> bodies, std::size_t chunk_size,
                                            const SendChunk& send) {
  auto executor = co_await asio::this_coro::executor;
  std::size_t sent = 0, failed = 0, next = 0;
  const std::size_t total = bodies.size();
  const auto start = Clock::now();
  const bool tty = options.progress && isatty(STDERR_FILENO);
  auto report = [&](bool final) {
    if (!options.progress) return;
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    std::cerr << (tty ? "\r" : "") << "sluice publish: " << sent << "/" << total << " sent, "
              << failed << " failed, " << static_cast<long>(sent / std::max(seconds, 1e-3))
              << " msg/s" << ((final || !tty) ? "\n" : "") << std::flush;
  };
  using Done =
      asio::experimental::channel<void(boost::system::error_code, std::size_t, std::size_t)>;
  Done done(executor, static_cast<std::size_t>(options.concurrency));
  int running = 0;
  std::size_t errors_shown = 0;  // the first few; the count says the rest
  auto last_report = Clock::now();
  while (next < total || running > 0) {
    while (next < total && running < options.concurrency) {
      const std::size_t first = next;
      const std::size_t n = std::min(chunk_size, total - next);
      std::vector<std::string> chunk(std::make_move_iterator(bodies.begin() + first),
                                     std::make_move_iterator(bodies.begin() + first + n));
      next += n;
      ++running;
      asio::co_spawn(executor, send(std::move(chunk), first),
                     [&done, &errors_shown, n](std::exception_ptr e, ChunkResult result) {
                       if (e) {
                         try {
                           std::rethrow_exception(e);
                         } catch (const std::exception& what) {
                           if (errors_shown++ < 5)
                             std::cerr << "sluice publish: " << what.what() << "\n";
                         } catch (...) {
                         }
                         result = {0, n};
                       }
                       done.try_send(boost::system::error_code{}, result.first, result.second);
                     });
    }
    auto [ok, bad] = co_await done.async_receive(asio::use_awaitable);
    --running;
    sent += ok;
    failed += bad;
    if (Clock::now() - last_report > std::chrono::milliseconds(200)) {
      report(false);
      last_report = Clock::now();
    }
  }
  report(true);
  co_return ChunkResult{sent, failed};
}

asio::awaitable<ChunkResult> publish_sqs(const PublishFlags& options,
                                         driver::PublishRequest request) {
  auto executor = co_await asio::this_coro::executor;
  sqs::SqsClientOptions client_options;
  client_options.endpoint_url = options.endpoint_url;
  client_options.region = options.region;
  auto client = std::make_shared<sqs::SqsClient>(executor, client_options);
  sqs::PublisherOptions publisher_options;
  if (!options.payload_bucket.empty()) {
    auto& large = publisher_options.large_payloads;
    large.enabled = true;
    large.bucket = options.payload_bucket;
    large.threshold = options.payload_threshold;
    large.s3.endpoint_url = options.s3_endpoint_url;
    large.s3.addressing =
        options.s3_path_style ? s3::AddressingStyle::path : s3::AddressingStyle::auto_detect;
  }
  publisher_options.trace_carrier = options.trace_carrier == "traceparent"
                                        ? sqs::PublisherOptions::TraceCarrier::traceparent
                                        : sqs::PublisherOptions::TraceCarrier::aws_trace_header;
  auto publisher = std::make_shared<sqs::Publisher>(client, options.queue_url, publisher_options);
  const bool fifo = options.queue_url.ends_with(".fifo");
  const GroupIds groups(options.group_id, options.group_id_from, fifo);
  const auto trace = request.trace;
  const auto carrier = publisher_options.trace_carrier;
  std::size_t first_error_shown = 0;
  // Named, not a temporary in the co_await: GCC 12 destroys such temporaries twice.
  sqs::MessageAttributes attributes;
  for (const auto& [name, value] : request.headers)
    attributes[name] = sqs::MessageAttributeValue::string(value);
  SendChunk send = [publisher, fifo, groups, attributes, trace, carrier, &first_error_shown](
                       std::vector<std::string> chunk,
                       std::size_t first) -> asio::awaitable<ChunkResult> {
    ChunkResult result{0, 0};
    std::vector<sqs::SendMessageEntry> entries;
    std::vector<std::size_t> index_of;  // entry -> the message's number in the run
    entries.reserve(chunk.size());
    for (std::size_t i = 0; i < chunk.size(); ++i) {
      auto group = groups.of(chunk[i], first + i);
      if (!group.error.empty()) {
        ++result.second;
        if (first_error_shown++ < 5)
          std::cerr << "sluice publish: message " << first + i << " not sent: " << group.error
                    << "\n";
        continue;
      }
      sqs::SendMessageEntry e;
      e.body = std::move(chunk[i]);
      e.message_attributes = attributes;
      if (trace) sqs::inject_trace(e, *trace, carrier);
      e.message_group_id = std::move(group.id);
      if (fifo) e.message_deduplication_id = "p" + std::to_string(first + i);
      entries.push_back(std::move(e));
      index_of.push_back(first + i);
    }
    if (entries.empty()) co_return result;
    const auto outcomes = co_await publisher->send_batch(std::move(entries));
    for (const auto& o : outcomes) {
      (o.ok ? result.first : result.second)++;
      if (!o.ok && first_error_shown++ < 5)
        std::cerr << "sluice publish: message " << index_of.at(o.index)
                  << " failed: " << o.error_code << " " << o.error_message << "\n";
    }
    co_return result;
  };
  auto bodies = std::move(request.bodies);
  const ChunkResult result = co_await publish_chunks(request, std::move(bodies), 100, send);
  co_return result;
}

// SNS: PublishBatch of 10 (or one Publish per message with --single); entries that
// failed for the service's reason are sent again, a few times.
asio::awaitable<ChunkResult> publish_sns(const PublishFlags& options,
                                         driver::PublishRequest request) {
  auto executor = co_await asio::this_coro::executor;
  sns::SnsClientOptions client_options;
  client_options.endpoint_url = options.endpoint_url;
  client_options.region = options.region;
  auto client = std::make_shared<sns::SnsClient>(executor, client_options);
  const std::string topic = options.topic_arn;
  const bool fifo = topic.ends_with(".fifo");
  const bool single = options.sns_single;
  std::size_t first_error_shown = 0;
  SendChunk send = [client, topic, fifo, single, &first_error_shown](
                       std::vector<std::string> chunk,
                       std::size_t first) -> asio::awaitable<ChunkResult> {
    std::vector<sns::PublishEntry> entries(chunk.size());
    for (std::size_t i = 0; i < chunk.size(); ++i) {
      entries[i].id = std::to_string(i);
      entries[i].message = std::move(chunk[i]);
      if (fifo) {
        entries[i].message_group_id = "g" + std::to_string((first + i) % 16);
        entries[i].message_deduplication_id = "p" + std::to_string(first + i);
      }
    }
    if (single) {
      co_await client->publish(topic, std::move(entries.front()));
      co_return ChunkResult{1, 0};
    }
    std::size_t sent = 0;
    for (int attempt = 1; !entries.empty(); ++attempt) {
      const auto result = co_await client->publish_batch(topic, entries);
      sent += result.successful.size();
      std::vector<sns::PublishEntry> again;
      for (const auto& f : result.failed) {
        auto it = std::find_if(entries.begin(), entries.end(),
                               [&](const auto& e) { return e.id == f.id; });
        if (it == entries.end()) continue;
        if (!f.sender_fault && attempt < 5) {
          again.push_back(*it);
        } else if (first_error_shown++ < 5) {
          std::cerr << "sluice publish: message " << first + std::stoul(f.id)
                    << " failed: " << f.code << " " << f.message << "\n";
        }
      }
      entries = std::move(again);
    }
    co_return ChunkResult{sent, chunk.size() - sent};
  };
  auto bodies = std::move(request.bodies);
  const ChunkResult result =
      co_await publish_chunks(request, std::move(bodies), single ? 1 : sns::kMaxBatchEntries, send);
  co_return result;
}

}  // namespace

std::optional<std::string> check_publish(const PublishFlags& options) {
  if (!options.queue_url.empty() && !options.topic_arn.empty())
    return "give --queue-url or --topic-arn, not both";
  if (!options.payload_bucket.empty() && options.queue_url.empty())
    return "--large-payload-bucket: only with --queue-url (SQS)";
  if ((!options.group_id.empty() || !options.group_id_from.empty()) && options.queue_url.empty())
    return "--group-id, --group-id-from: only with --queue-url (SQS)";
  if (auto wrong = GroupIds(options.group_id, options.group_id_from, false).check()) return wrong;
  if (options.payload_threshold > kMaxMessageBytes)
    return "--payload-threshold: got " + std::to_string(options.payload_threshold) +
           ", expected at most " + std::to_string(kMaxMessageBytes) +
           " (SQS's largest message; 0: the queue's MaximumMessageSize)";
  for (const auto& [flag, url] :
       {std::pair<const char*, std::string>{"--endpoint-url", options.endpoint_url},
        {"--s3-endpoint-url", options.s3_endpoint_url}}) {
    if (url.empty()) continue;
    try {
      aws::Url::parse(url);
    } catch (const aws::AwsError& e) {
      return std::string(flag) + ": " + e.what();
    }
  }
  return std::nullopt;
}

int run_publish(const PublishFlags& options, driver::PublishRequest request) {
  if (!options.topic_arn.empty() && !request.headers.empty()) {
    std::cerr << "sluice publish: --header: only with --queue-url (SQS message attributes) or "
                 "--amqp-url (headers), not --topic-arn\n";
    return 2;
  }
  asio::io_context io;
  auto result = asio::co_spawn(io,
                               options.topic_arn.empty() ? publish_sqs(options, std::move(request))
                                                         : publish_sns(options, std::move(request)),
                               asio::use_future);
  io.run();
  try {
    const auto [sent, failed] = result.get();
    return failed == 0 ? 0 : 1;
  } catch (const aws::AwsError& e) {
    std::cerr << "sluice publish: " << e.what() << "\n";
    return exit_code_of(e);
  }
}

}  // namespace sluice::sqs
