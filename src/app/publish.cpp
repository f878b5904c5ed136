#include "app/publish.hpp"

#include <unistd.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/channel.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <tuple>

#include "amqp/connection.hpp"
#include "sluice/amqp/publisher.hpp"
#include "sluice/aws/error.hpp"
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

asio::awaitable<std::pair<std::size_t, std::size_t>> publish_all(const PublishOptions& options,
                                                                 std::vector<std::string> bodies) {
  auto executor = co_await asio::this_coro::executor;
  sqs::SqsClientOptions client_options;
  client_options.endpoint_url = options.endpoint_url;
  client_options.region = options.region;
  auto client = std::make_shared<sqs::SqsClient>(executor, client_options);
  sqs::Publisher publisher(client, options.queue_url);
  const bool fifo = options.queue_url.ends_with(".fifo");
  std::size_t sent = 0, failed = 0, next = 0;
  const auto start = Clock::now();
  const bool tty = options.progress && isatty(STDERR_FILENO);
  auto report = [&](bool final) {
    if (!options.progress) return;
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    std::cerr << (tty ? "\r" : "") << "sluice publish: " << sent << "/" << bodies.size()
              << " sent, " << failed << " failed, "
              << static_cast<long>(sent / std::max(seconds, 1e-3)) << " msg/s"
              << ((final || !tty) ? "\n" : "") << std::flush;
  };
  // Chunks of 100 entries, `concurrency` chunks in flight.
  using Done =
      asio::experimental::channel<void(boost::system::error_code, std::size_t, std::size_t)>;
  Done done(executor, static_cast<std::size_t>(options.concurrency));
  int running = 0;
  auto last_report = Clock::now();
  while (next < bodies.size() || running > 0) {
    while (next < bodies.size() && running < options.concurrency) {
      std::vector<sqs::SendMessageEntry> entries;
      for (; next < bodies.size() && entries.size() < 100; ++next) {
        sqs::SendMessageEntry e;
        e.body = std::move(bodies[next]);
        if (fifo) {
          e.message_group_id = "g" + std::to_string(next % 16);
          e.message_deduplication_id = "p" + std::to_string(next);
        }
        entries.push_back(std::move(e));
      }
      ++running;
      const std::size_t chunk = entries.size();
      asio::co_spawn(
          executor, publisher.send_batch(std::move(entries)),
          [&done, chunk](std::exception_ptr e, std::vector<sqs::PublishOutcome> outcomes) {
            std::size_t ok = 0, bad = 0;
            if (e) {
              bad = chunk;
            } else {
              for (const auto& o : outcomes) (o.ok ? ok : bad)++;
            }
            done.try_send(boost::system::error_code{}, ok, bad);
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
  co_return std::make_pair(sent, failed);
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
  if (options.queue_url.empty() && options.amqp_url.empty()) {
    std::cerr << "sluice publish: give --queue-url (SQS) or --amqp-url (or SLUICE_AMQP_URL) for "
                 "RabbitMQ\n";
    return 2;
  }
  // --queue-url chooses SQS even when SLUICE_AMQP_URL is set.
  const bool amqp = options.queue_url.empty();
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
  } catch (const std::exception& e) {
    std::cerr << "sluice publish: " << e.what() << "\n";
    return 2;
  }
  if (amqp) return publish_amqp(options, std::move(bodies));
  asio::io_context io;
  auto result = asio::co_spawn(io, publish_all(options, std::move(bodies)), asio::use_future);
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
