#include "sqs/round_trip.hpp"

#include <fmt/core.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/channel.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>
#include <set>

#include "sluice/aws/error.hpp"
#include "sluice/sqs/client.hpp"
#include "sluice/sqs/publisher.hpp"

namespace sluice::sqs {
namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

namespace {

struct Tally {
  std::set<std::string> seen;
  int received = 0;
  int duplicates = 0;
  int deleted = 0;
  int delete_failures = 0;
  int receives = 0;
};

asio::awaitable<void> drain(std::shared_ptr<sqs::SqsClient> client, std::string queue_url,
                            int expected, Tally& tally) {
  while (static_cast<int>(tally.seen.size()) < expected) {
    sqs::ReceiveMessageRequest request;
    request.queue_url = queue_url;
    request.max_messages = 10;
    request.wait_time_seconds = 1;
    auto messages = co_await client->receive_message(request);
    ++tally.receives;
    if (messages.empty()) continue;
    std::vector<sqs::DeleteMessageEntry> deletes;
    for (std::size_t i = 0; i < messages.size(); ++i) {
      ++tally.received;
      if (!tally.seen.insert(messages[i].message_id).second) ++tally.duplicates;
      deletes.push_back({"d" + std::to_string(i), messages[i].receipt_handle});
    }
    const auto result = co_await client->delete_message_batch(queue_url, deletes);
    tally.deleted += static_cast<int>(result.successful.size());
    tally.delete_failures += static_cast<int>(result.failed.size());
  }
}

// Inventory events (stock adjustments per SKU and location), as the inventory example
// consumes.
std::vector<sqs::SendMessageEntry> sample_events(int count) {
  std::vector<sqs::SendMessageEntry> entries;
  for (int i = 0; i < count; ++i) {
    sqs::SendMessageEntry entry;
    entry.body = nlohmann::json{
        {"eventId", i},
        {"skuId", "SKU-" + std::to_string(i % 97)},
        {"locationId", "LOC-" + std::to_string(i % 7)},
        {"eventType", "ADJUST"},
        {"quantity",
         i % 13}}.dump();
    entry.message_attributes["source"] = sqs::MessageAttributeValue::string("sluice-demo");
    entries.push_back(std::move(entry));
  }
  return entries;
}

// Kept out of the coroutine: GCC 12 mis-compiles fmt's compile-time format strings there.
void print_summary(const RoundTripOptions& options, int published, const Tally& tally,
                   double drain_seconds, const std::string& visible, const std::string& in_flight,
                   sqs::SqsClient& client, bool ok) {
  fmt::print("\n== sluice round trip summary ==\n");
  fmt::print("  published          {}\n", published);
  fmt::print("  received (unique)  {}\n", tally.seen.size());
  fmt::print("  redelivered        {}\n", tally.duplicates);
  fmt::print("  deleted            {}  (failed deletes: {})\n", tally.deleted,
             tally.delete_failures);
  fmt::print("  receive calls      {}  ({} concurrent long polls)\n", tally.receives,
             options.concurrent_receives);
  fmt::print("  drain rate         {:.0f} messages/s ({:.2f} s)\n",
             tally.seen.size() / std::max(drain_seconds, 1e-9), drain_seconds);
  fmt::print("  left in queue      visible={} in-flight={}\n", visible, in_flight);
  fmt::print("  HTTP               {} requests, {} retries, {} connections\n",
             client.stats().requests, client.stats().retries,
             client.http().stats().connections_opened);
  fmt::print("  result             {}\n",
             ok ? "OK: every message delivered once and deleted" : "FAILED: see the counts above");
}

asio::awaitable<int> round_trip(const RoundTripOptions& options) {
  auto executor = co_await asio::this_coro::executor;
  sqs::SqsClientOptions client_options;
  client_options.endpoint_url = options.endpoint_url;
  client_options.region = options.region;
  auto client = std::make_shared<sqs::SqsClient>(executor, client_options);
  std::cout << "sluice: SQS endpoint " << client->endpoint().origin() << " (region "
            << client->region() << ")\n";

  const std::string queue_url = co_await client->create_queue(options.queue_name);
  co_await client->purge_queue(queue_url);
  std::cout << "sluice: queue " << queue_url << " ready\n";

  std::vector<sqs::SendMessageEntry> entries = sample_events(options.messages);
  sqs::Publisher publisher(client, queue_url);
  const auto publish_start = Clock::now();
  const auto outcomes = co_await publisher.send_batch(std::move(entries));
  const double publish_seconds =
      std::chrono::duration<double>(Clock::now() - publish_start).count();
  int published = 0;
  for (const auto& o : outcomes) published += o.ok ? 1 : 0;
  std::cout << "sluice: published " << published << "/" << options.messages << " messages in "
            << publish_seconds << " s\n";

  Tally tally;
  const auto drain_start = Clock::now();
  // Overlapping long polls: several receives in flight at once.
  using Done = asio::experimental::channel<void(boost::system::error_code, std::exception_ptr)>;
  Done done(executor, static_cast<std::size_t>(options.concurrent_receives));
  for (int i = 0; i < options.concurrent_receives; ++i)
    asio::co_spawn(
        executor, drain(client, queue_url, published, tally),
        [&done](std::exception_ptr e) { done.try_send(boost::system::error_code{}, e); });
  std::exception_ptr first_error;
  for (int i = 0; i < options.concurrent_receives; ++i) {
    auto e = co_await done.async_receive(asio::use_awaitable);
    if (e && !first_error) first_error = e;
  }
  if (first_error) std::rethrow_exception(first_error);
  const double drain_seconds = std::chrono::duration<double>(Clock::now() - drain_start).count();
  const auto attributes = co_await client->get_queue_attributes(queue_url);
  auto attr = [&](const char* name) {
    auto it = attributes.find(name);
    return it == attributes.end() ? std::string("?") : it->second;
  };
  if (!options.keep_queue) co_await client->delete_queue(queue_url);

  const bool ok = published == options.messages &&
                  static_cast<int>(tally.seen.size()) == published && tally.delete_failures == 0;
  print_summary(options, published, tally, drain_seconds, attr("ApproximateNumberOfMessages"),
                attr("ApproximateNumberOfMessagesNotVisible"), *client, ok);
  co_return ok ? 0 : 1;
}

}  // namespace

int run_round_trip(const RoundTripOptions& options) {
  asio::io_context io;
  auto result = asio::co_spawn(io, round_trip(options), asio::use_future);
  io.run();
  try {
    return result.get();
  } catch (const aws::AwsError& e) {
    fmt::print(stderr, "sluice: error ({}{}): {}\n", aws::to_string(e.kind()),
               e.code().empty() ? "" : ", " + e.code(), e.what());
    return e.kind() == aws::ErrorKind::configuration ? 2 : 1;
  }
}

}  // namespace sluice::sqs
