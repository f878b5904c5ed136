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

int main(int argc, char** argv) {
  int count = 0;
  if (argc != 4 ||
      std::from_chars(argv[3], argv[3] + std::strlen(argv[3]), count).ec != std::errc{} ||
      count < 1) {
    std::cerr << "usage: " << argv[0] << " <from-queue-url> <to-queue-url> <count>\n";
    return 2;
  }
  // The publishing thread: the publisher's coroutines run here.
  asio::io_context publishing;
  auto work = asio::make_work_guard(publishing);
  std::thread publishing_thread([&] { publishing.run(); });
  auto client = std::make_shared<sluice::sqs::SqsClient>(publishing.get_executor());
  sluice::sqs::Publisher publisher(client, argv[2]);

  std::mutex mutex;
  std::condition_variable changed;
  int relayed = 0;
  auto handler = [&](sluice::Message& message) {
    sluice::sqs::SendMessageEntry entry;
    entry.body = message.body();
    entry.message_attributes["relayed-from"] =
        sluice::sqs::MessageAttributeValue::string(std::string(message.id()));
    // Blocks this worker until SQS has it; throws (the message is retried) if not.
    asio::co_spawn(publishing, publisher.send(std::move(entry)), asio::use_future).get();
    std::lock_guard lock(mutex);
    ++relayed;
    changed.notify_all();
  };  // returns: acked

  sluice::ContainerOptions options;
  options.name = "relay";
  sluice::SqsSourceOptions source;
  source.queue_url = argv[1];
  source.poll_wait = std::chrono::seconds(1);
  sluice::Container container(options, sluice::make_sqs_source(source), handler);
  container.start();
  {
    std::unique_lock lock(mutex);
    changed.wait_for(lock, std::chrono::seconds(60), [&] { return relayed >= count; });
  }
  container.stop();  // acks are flushed
  work.reset();
  publishing_thread.join();
  std::cout << "relayed " << relayed << " of " << count << "\n";
  return relayed >= count ? 0 : 1;
}
