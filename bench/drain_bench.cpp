// Drain benchmark, in one run against one emulator:
//   1. the ceiling: a minimal client (overlapping receive + batch delete loops, no
//      processing), the fastest this emulator can be drained;
//   2. the container with a no-op handler, same backlog;
//   3. memory per in-flight message (a stuck handler holding max_in_flight).
// Usage: bench_drain [messages] [concurrent_receives]
#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <atomic>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <thread>

#include "bench_support.hpp"
#include "sluice/container.hpp"
#include "sluice/sqs/client.hpp"
#include "sluice/sqs/publisher.hpp"
#include "sluice/sqs/source.hpp"
#include "support/emulator.hpp"
#include "support/local_sqs.hpp"
#include "support/run.hpp"

namespace asio = boost::asio;
using namespace sluice;
using Clock = std::chrono::steady_clock;

namespace {

std::string fill_queue(asio::io_context& io, std::shared_ptr<sqs::SqsClient> client,
                       const std::string& prefix, int count) {
  const std::string body =
      R"({"skuId":"SKU-1","locationId":"LOC-1","eventType":"ADJUST","quantity":3,"pad":")" +
      std::string(200, 'x') + "\"}";
  return bench::fill_queue(io, client, prefix,
                           std::vector<std::string>(static_cast<std::size_t>(count), body));
}

struct Result {
  double seconds;
  double cpu;
};

Result container_drain(const std::string& url, int count, int receives) {
  ContainerOptions options;
  options.name = "bench";
  options.max_in_flight = 400;
  options.min_concurrent_receives = receives;
  options.max_concurrent_receives = receives;
  options.worker_threads =
      std::getenv("BENCH_WORKERS") ? std::atoi(std::getenv("BENCH_WORKERS")) : 4;
  SqsSourceOptions source;
  source.queue_url = url;
  source.client = test::emulator_client_options();
  source.poll_wait = std::chrono::seconds(1);
  Container container(options, make_sqs_source(source), MessageHandler([](Message&) {}));
  const double cpu0 = test::cpu_seconds();
  const auto start = Clock::now();
  container.start();
  while (container.stats().acked < static_cast<std::uint64_t>(count))
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const double cpu = test::cpu_seconds() - cpu0;
  container.stop();
  return {seconds, cpu};
}

double memory_per_in_flight(asio::io_context& io, std::shared_ptr<sqs::SqsClient> client,
                            int held) {
  const std::string url = fill_queue(io, client, "bench-mem", held + 500);
  std::mutex m;
  std::condition_variable cv;
  bool open = false;
  ContainerOptions options;
  options.name = "bench-mem";
  options.max_in_flight = held;
  options.min_concurrent_receives = options.max_concurrent_receives = 8;
  options.worker_threads = 2;
  options.heartbeat = false;
  SqsSourceOptions source;
  source.queue_url = url;
  source.client = test::emulator_client_options();
  source.poll_wait = std::chrono::seconds(1);
  source.visibility_timeout = std::chrono::seconds(300);
  Container container(options, make_sqs_source(source), MessageHandler([&](Message&) {
                        std::unique_lock lock(m);
                        cv.wait(lock, [&] { return open; });
                      }));
  const long before = test::rss_kib();
  container.start();
  while (container.stats().in_flight < held)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const long after = test::rss_kib();
  {
    std::lock_guard lock(m);
    open = true;
  }
  cv.notify_all();
  container.stop();
  return static_cast<double>(after - before) * 1024.0 / held;
}

}  // namespace

int main(int argc, char** argv) {
  const int count = argc > 1 ? std::atoi(argv[1]) : 20000;
  const int receives = argc > 2 ? std::atoi(argv[2]) : 8;
  spdlog::set_level(spdlog::level::warn);
  asio::io_context io;
  auto client =
      std::make_shared<sqs::SqsClient>(io.get_executor(), test::emulator_client_options());

  std::printf(
      "drain benchmark: %d messages of ~300 B, %d concurrent receives, emulator fauxqs on "
      "loopback\n",
      count, receives);
  const std::string url1 = fill_queue(io, client, "bench-ceiling", count);
  const bench::Drain raw = bench::ceiling(io, client, url1, count, receives);
  const std::string url2 = fill_queue(io, client, "bench-container", count);
  const Result box = container_drain(url2, count, receives);
  const double raw_rate = raw.messages_per_second, box_rate = count / box.seconds;
  std::printf("%-34s %10.0f msg/s  %8.2f us CPU/msg\n", "ceiling (receive+delete, no work)",
              raw_rate, raw.cpu_us_per_message);
  std::printf("%-34s %10.0f msg/s  %8.2f us CPU/msg\n", "sluice container (no-op handler)",
              box_rate, box.cpu / count * 1e6);
  std::printf("%-34s %10.2f\n", "ratio container/ceiling", box_rate / raw_rate);
  const double bytes = memory_per_in_flight(io, client, 5000);
  std::printf("%-34s %10.0f bytes (5000 held, ~300 B bodies)\n", "memory per in-flight message",
              bytes);
  return 0;
}
