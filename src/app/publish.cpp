#include "app/publish.hpp"

#include <unistd.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/channel.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <fstream>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <tuple>

#include "amqp/connection.hpp"
#include "sluice/amqp/publisher.hpp"
#include "sluice/aws/error.hpp"
#include "sluice/aws/http.hpp"
#include "sluice/sns/client.hpp"
#include "sluice/sqs/publisher.hpp"

namespace sluice::app {
namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

GeneratedEvents generate_events(int count, double duplicate_share, double malformed_share,
                                unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> unit(0, 1);
  GeneratedEvents out;
  std::vector<nlohmann::json> originals;
  std::set<std::tuple<std::string, std::string, std::string, long>> distinct;
  static const char* kTypes[] = {"RECEIVED", "MOVED", "ADJUSTED", "SHIPPED", "COUNTED"};
  for (int i = 0; i < count; ++i) {
    const double r = unit(rng);
    if (r < malformed_share) {
      // Broken on purpose, one of three ways: not JSON, a missing field, a wrong type.
      const int kind = i % 3;
      out.bodies.push_back(
          kind == 0 ? R"({"eventId": "e-)" + std::to_string(i) + R"(", "skuId": )"
          : kind == 1
              ? R"({"eventId":"e-)" + std::to_string(i) +
                    R"(","locationId":"L-1","eventType":"MOVED","quantity":1})"
              : R"({"eventId":"e-)" + std::to_string(i) +
                    R"(","skuId":"SKU-1","locationId":"L-1","eventType":"MOVED","quantity":"many"})");
      ++out.malformed;
      continue;
    }
    nlohmann::json event;
    if (!originals.empty() && r < malformed_share + duplicate_share) {
      // The same business record from another upstream: not byte-identical (new event
      // id and timestamp, numbers as strings, extra metadata), same business fields.
      const auto& original = originals[rng() % originals.size()];
      event = {{"source", "upstream-b"},
               {"quantity", std::to_string(original["quantity"].get<long>())},
               {"eventType", original["eventType"]},
               {"skuId", original["skuId"]},
               {"locationId", original["locationId"]},
               {"eventId", "dup-" + std::to_string(i)},
               {"emittedAt", 1700000000000 + i}};
    } else {
      event = {{"eventId", "e-" + std::to_string(i)},
               {"skuId", "SKU-" + std::to_string(rng() % 5000)},
               {"locationId", "LOC-" + std::to_string(rng() % 40)},
               {"eventType", kTypes[rng() % 5]},
               {"quantity", static_cast<long>(rng() % 100)},
               {"emittedAt", 1700000000000 + i},
               {"source", "upstream-a"}};
      originals.push_back(event);
    }
    long quantity = event["quantity"].is_string() ? std::stol(event["quantity"].get<std::string>())
                                                  : event["quantity"].get<long>();
    distinct.emplace(event["skuId"], event["locationId"], event["eventType"], quantity);
    out.bodies.push_back(event.dump());
  }
  out.distinct_records = distinct.size();
  return out;
}

std::size_t pad_events(std::vector<std::string>& bodies, double share, std::size_t bytes,
                       unsigned seed) {
  std::mt19937 rng(seed ^ 0x5eed);
  std::uniform_real_distribution<double> unit(0, 1);
  std::size_t padded = 0;
  for (auto& body : bodies) {
    if (unit(rng) >= share) continue;
    auto doc = nlohmann::json::parse(body, nullptr, false);
    if (!doc.is_object() || body.size() + 16 >= bytes) continue;
    doc["padding"] = "";
    const std::size_t base = doc.dump().size();
    doc["padding"] = std::string(bytes > base ? bytes - base : 0, 'x');
    body = doc.dump();
    ++padded;
  }
  return padded;
}

namespace {

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) lines.push_back(line);
  return lines;
}

using ChunkResult = std::pair<std::size_t, std::size_t>;  // sent, failed
// Sends bodies[first, first + n) as one unit of work.
using SendChunk =
    std::function<asio::awaitable<ChunkResult>(std::vector<std::string> bodies, std::size_t first)>;

// Chunks of `chunk_size` bodies, `concurrency` chunks in flight, with progress.
asio::awaitable<ChunkResult> publish_chunks(const PublishOptions& options,
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

asio::awaitable<ChunkResult> publish_sqs(const PublishOptions& options,
                                         std::vector<std::string> bodies) {
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
  auto publisher = std::make_shared<sqs::Publisher>(client, options.queue_url, publisher_options);
  const bool fifo = options.queue_url.ends_with(".fifo");
  std::size_t first_error_shown = 0;
  // Named, not a temporary in the co_await: GCC 12 destroys such temporaries twice.
  SendChunk send = [publisher, fifo, &first_error_shown](
                       std::vector<std::string> chunk,
                       std::size_t first) -> asio::awaitable<ChunkResult> {
    std::vector<sqs::SendMessageEntry> entries;
    entries.reserve(chunk.size());
    for (std::size_t i = 0; i < chunk.size(); ++i) {
      sqs::SendMessageEntry e;
      e.body = std::move(chunk[i]);
      if (fifo) {
        e.message_group_id = "g" + std::to_string((first + i) % 16);
        e.message_deduplication_id = "p" + std::to_string(first + i);
      }
      entries.push_back(std::move(e));
    }
    const auto outcomes = co_await publisher->send_batch(std::move(entries));
    ChunkResult result{0, 0};
    for (const auto& o : outcomes) {
      (o.ok ? result.first : result.second)++;
      if (!o.ok && first_error_shown++ < 5)
        std::cerr << "sluice publish: message " << first + o.index << " failed: " << o.error_code
                  << " " << o.error_message << "\n";
    }
    co_return result;
  };
  const ChunkResult result = co_await publish_chunks(options, std::move(bodies), 100, send);
  co_return result;
}

// SNS: PublishBatch of 10 (or one Publish per message with --single); entries that
// failed for the service's reason are sent again, a few times.
asio::awaitable<ChunkResult> publish_sns(const PublishOptions& options,
                                         std::vector<std::string> bodies) {
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
  const ChunkResult result =
      co_await publish_chunks(options, std::move(bodies), single ? 1 : sns::kMaxBatchEntries, send);
  co_return result;
}

// RabbitMQ: windows of publishes whose confirms are awaited together.
int publish_amqp(const PublishOptions& options, std::vector<std::string> bodies) {
  amqp::PublisherOptions o;
  o.uri = options.amqp_url;
  std::vector<amqp::OutgoingMessage> messages;
  messages.reserve(bodies.size());
  for (auto& body : bodies) {
    amqp::OutgoingMessage m;
    m.body = std::move(body);
    m.routing_key = options.routing_key;
    messages.push_back(std::move(m));
  }
  const std::size_t total = messages.size();
  const auto start = Clock::now();
  const bool tty = options.progress && isatty(STDERR_FILENO);
  auto last_report = Clock::now();
  auto report = [&](std::size_t settled, bool final) {
    if (!options.progress) return;
    if (!final && Clock::now() - last_report < std::chrono::milliseconds(200)) return;
    last_report = Clock::now();
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    std::cerr << (tty ? "\r" : "") << "sluice publish: " << settled << "/" << total
              << " confirmed, " << static_cast<long>(settled / std::max(seconds, 1e-3)) << " msg/s"
              << ((final || !tty) ? "\n" : "") << std::flush;
  };
  try {
    amqp::Publisher publisher(o);
    const auto result = publisher.publish(options.exchange, std::move(messages),
                                          [&](std::size_t settled) { report(settled, false); });
    report(result.confirmed, true);
    for (const auto& e : result.errors) std::cerr << "sluice publish: " << e << "\n";
    if (!result.ok())
      std::cerr << "sluice publish: " << result.returned << " returned (unroutable), "
                << result.failed << " not confirmed\n";
    return result.ok() ? 0 : 1;
  } catch (const amqp::AmqpError& e) {
    std::cerr << "sluice publish: --amqp-url: " << e.what() << "\n";
    return e.kind() == amqp::AmqpError::Kind::auth ? 2 : 1;
  }
}

}  // namespace

int run_publish(const PublishOptions& options) {
  if (options.queue_url.empty() && options.topic_arn.empty() && options.amqp_url.empty()) {
    std::cerr << "sluice publish: give --queue-url (SQS), --topic-arn (SNS) or --amqp-url (or "
                 "SLUICE_AMQP_URL) for RabbitMQ\n";
    return 2;
  }
  if (!options.queue_url.empty() && !options.topic_arn.empty()) {
    std::cerr << "sluice publish: give --queue-url or --topic-arn, not both\n";
    return 2;
  }
  if (!options.payload_bucket.empty() && options.queue_url.empty()) {
    std::cerr << "sluice publish: --large-payload-bucket: only with --queue-url (SQS)\n";
    return 2;
  }
  for (const auto& [flag, url] :
       {std::pair<const char*, std::string>{"--endpoint-url", options.endpoint_url},
        {"--s3-endpoint-url", options.s3_endpoint_url}}) {
    if (url.empty()) continue;
    try {
      aws::Url::parse(url);
    } catch (const aws::AwsError& e) {
      std::cerr << "sluice publish: " << flag << ": " << e.what() << "\n";
      return 2;
    }
  }
  // --queue-url or --topic-arn chooses AWS even when SLUICE_AMQP_URL is set.
  const bool amqp = options.queue_url.empty() && options.topic_arn.empty();
  if (amqp) {
    try {
      amqp::parse_uri(options.amqp_url);
    } catch (const std::invalid_argument& e) {
      std::cerr << "sluice publish: --amqp-url: " << e.what() << "\n";
      return 2;
    }
    if (options.exchange.empty() && options.routing_key.empty()) {
      std::cerr << "sluice publish: --routing-key: missing (with the default exchange it names "
                   "the queue)\n";
      return 2;
    }
  }
  std::vector<std::string> bodies;
  try {
    if (!options.file.empty()) {
      bodies = read_lines(options.file);
    } else {
      auto generated = generate_events(options.generate, options.duplicate_share,
                                       options.malformed_share, options.seed);
      std::cerr << "sluice publish: generated " << generated.bodies.size()
                << " events: " << generated.distinct_records << " distinct business records, "
                << generated.malformed << " malformed on purpose\n";
      bodies = std::move(generated.bodies);
    }
    if (options.large_share > 0) {
      const std::size_t padded =
          pad_events(bodies, options.large_share, options.large_bytes, options.seed);
      std::cerr << "sluice publish: " << padded << " events padded to " << options.large_bytes
                << " bytes\n";
    }
  } catch (const std::exception& e) {
    std::cerr << "sluice publish: " << e.what() << "\n";
    return 2;
  }
  if (amqp) return publish_amqp(options, std::move(bodies));
  asio::io_context io;
  auto result = asio::co_spawn(io,
                               options.topic_arn.empty() ? publish_sqs(options, std::move(bodies))
                                                         : publish_sns(options, std::move(bodies)),
                               asio::use_future);
  io.run();
  try {
    const auto [sent, failed] = result.get();
    return failed == 0 ? 0 : 1;
  } catch (const aws::AwsError& e) {
    std::cerr << "sluice publish: " << e.what() << "\n";
    return e.kind() == aws::ErrorKind::configuration ? 2 : 1;
  }
}

}  // namespace sluice::app
