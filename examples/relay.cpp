// Usage: example_relay <from-queue-url> <to-queue-url> <count>
// A handler that publishes: each message of one queue is sent on to another, and
// acked only once the second queue has it (at least once end to end: a crash between
// the send and the ack sends it again). Stops after <count> messages.
//
// How a handler publishes: the publisher's calls are coroutines, and a handler is a
// plain function on a worker thread. The handler runs them on an io_context of its own
// (one thread, shared by every worker) and waits for each with use_future. Waiting is
// fine on the container's workers (worker_threads > 0, the default); a handler run on
// the I/O thread itself (worker_threads = 0) must never wait like this.
// Region, endpoint and credentials come from the environment (AWS_ENDPOINT_URL_SQS).
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#include <charconv>
#include <condition_variable>
#include <cstring>
#include <iostream>
#include <mutex>
#include <thread>

#include "sluice/container.hpp"
#include "sluice/sqs/publisher.hpp"
#include "sluice/sqs/source.hpp"

namespace asio = boost::asio;

// What the handler and main() share; kept by the handler too, so that a handler still
// running after main() gave up never touches freed state.
struct Relay {
  std::mutex mutex;
  std::condition_variable changed;
  int relayed = 0;
};

int run(const std::string& from, const std::string& to, int count) {
  // The publishing thread: the publisher's coroutines run here. The client is made
  // first: it throws on a bad configuration (no region), before any thread runs.
  asio::io_context publishing;
  auto client = std::make_shared<sluice::sqs::SqsClient>(publishing.get_executor());
  auto publisher = std::make_shared<sluice::sqs::Publisher>(client, to);
  auto work = asio::make_work_guard(publishing);
  std::jthread publishing_thread([&] { publishing.run(); });
  struct EndPublishing {  // however run() ends: the thread ends after the last send
    decltype(work)& guard;
    ~EndPublishing() { guard.reset(); }
  } end_publishing{work};

  auto relay = std::make_shared<Relay>();
  auto handler = [relay, publisher, &publishing](sluice::Message& message) {
    sluice::sqs::SendMessageEntry entry;
    entry.body = message.body();
    entry.message_attributes["relayed-from"] =
        sluice::sqs::MessageAttributeValue::string(std::string(message.id()));
    // Blocks this worker until SQS has it; throws (the message is retried) if not.
    asio::co_spawn(publishing, publisher->send(std::move(entry)), asio::use_future).get();
    std::lock_guard lock(relay->mutex);
    ++relay->relayed;
    relay->changed.notify_all();
  };  // returns: acked

  sluice::ContainerOptions options;
  options.name = "relay";
  sluice::SqsSourceOptions source;
  source.queue_url = from;
  source.poll_wait = std::chrono::seconds(1);
  sluice::Container container(options, sluice::make_sqs_source(source), handler);
  container.start();
  int relayed = 0;
  {
    std::unique_lock lock(relay->mutex);
    relay->changed.wait_for(lock, std::chrono::seconds(60),
                            [&] { return relay->relayed >= count; });
    relayed = relay->relayed;
  }
  container.stop();  // handlers finish, acks are flushed
  std::cout << "relayed " << relayed << " of " << count << "\n";
  return relayed >= count ? 0 : 1;
}

int main(int argc, char** argv) {
  int count = 0;
  const char* end = argc == 4 ? argv[3] + std::strlen(argv[3]) : nullptr;
  if (argc != 4 || std::from_chars(argv[3], end, count).ptr != end || count < 1) {
    std::cerr << "usage: " << argv[0] << " <from-queue-url> <to-queue-url> <count>\n";
    return 2;
  }
  try {
    return run(argv[1], argv[2], count);
  } catch (const std::exception& e) {
    std::cerr << "relay: " << e.what() << "\n";
    return 1;
  }
}
