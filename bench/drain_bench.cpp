// Drain benchmark, in one run against one emulator:
//   1. the ceiling: a minimal client (overlapping receive + batch delete loops, no
//      processing), the fastest this emulator can be drained;
//   2. the container with a no-op handler, same backlog;
//   3. memory per in-flight message (a stuck handler holding max_in_flight), and the
//      process's RSS holding 1,000 and 10,000 messages of 1 KiB;
//   4. head-of-line: 1 ms handlers on workers, with and without one 10 s message
//      among them.
// The container runs twice: handlers on the I/O thread (worker_threads 0) and on 4
// workers. Each figure is also printed as a "DATA name value" line for
// bench/run-all.sh. Unlike bench_pipeline, everything here runs in this one process and
// is timed from inside it (CPU from getrusage around each phase, the clock from the
// start of a drain to its last delete): a library container has no process of its own.
// An untimed drain first warms up the emulator.
// Usage: bench_drain [messages] [concurrent_receives]   (BENCH_SKIP_EXTRAS=1: only 1-2)
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

void data(const std::string& name, double value) {
  std::printf("DATA %s %.3f\n", name.c_str(), value);
}

// The SQS calls the source made (its running totals, reported as source gauges).
struct RequestCounter : ContainerObserver {
  std::atomic<double> receives{0}, deletes{0}, visibility{0};
  void on_source_gauge(const std::string& name, double value) override {
    if (name == "sqs_receive_requests") receives = value;
    if (name == "sqs_delete_requests") deletes = value;
    if (name == "sqs_change_visibility_requests") visibility = value;
  }
};

struct Result {
  double seconds;
  double cpu;
  double requests_per_1000;
};

Result container_drain(const std::string& url, int count, int receives, int workers) {
  ContainerOptions options;
  options.name = "bench";
  options.max_in_flight = 400;
  options.min_concurrent_receives = receives;
  options.max_concurrent_receives = receives;
  options.worker_threads = workers;
  SqsSourceOptions source;
  source.queue_url = url;
  source.client = test::emulator_client_options();
  source.poll_wait = std::chrono::seconds(1);
  Container container(options, make_sqs_source(source), MessageHandler([](Message&) {}));
  auto requests = std::make_shared<RequestCounter>();
  container.set_observer(requests);
  const double cpu0 = test::cpu_seconds();
  const auto start = Clock::now();
  container.start();
  while (container.stats().acked < static_cast<std::uint64_t>(count))
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const double cpu = test::cpu_seconds() - cpu0;
  container.stop();  // its final flush reports the last totals
  const double calls = requests->receives + requests->deletes + requests->visibility;
  return {seconds, cpu, calls / count * 1000.0};
}

// Seconds until `quick` messages of 1 ms are handled, on 16 workers with
// max_in_flight 100, with one 10 s message among them or not.
double head_of_line(asio::io_context& io, std::shared_ptr<sqs::SqsClient> client, int quick,
                    bool with_slow) {
  std::vector<std::string> bodies(static_cast<std::size_t>(quick), "quick");
  if (with_slow) bodies.insert(bodies.begin() + 5, "slow");
  const std::string url = bench::fill_queue(io, client, "bench-hol", bodies);
  ContainerOptions options;
  options.name = "bench-hol";
  options.max_in_flight = 100;
  options.min_concurrent_receives = options.max_concurrent_receives = 4;
  options.worker_threads = 16;
  options.shutdown_deadline = std::chrono::milliseconds(100);
  SqsSourceOptions source;
  source.queue_url = url;
  source.client = test::emulator_client_options();
  source.poll_wait = std::chrono::seconds(1);
  std::atomic<int> done{0};
  Container container(options, make_sqs_source(source), MessageHandler([&](Message& m) {
                        if (m.body() == "slow") {
                          std::this_thread::sleep_for(std::chrono::seconds(10));
                          return;
                        }
                        std::this_thread::sleep_for(std::chrono::milliseconds(1));
                        ++done;
                      }));
  const auto start = Clock::now();
  container.start();
  while (done.load() < quick) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  container.stop();
  return seconds;
}

// The process's RSS (VmRSS, KiB) before and while a stuck handler holds `held`
// messages of the queue at `url` (max_in_flight = held).
struct Holding {
  long before_kib, after_kib;
};
Holding hold(const std::string& url, int held) {
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
  return {before, after};
}

// Resident bytes per held message (~300 B bodies).
double memory_per_in_flight(asio::io_context& io, std::shared_ptr<sqs::SqsClient> client,
                            int held) {
  const Holding h = hold(fill_queue(io, client, "bench-mem", held + 500), held);
  return static_cast<double>(h.after_kib - h.before_kib) * 1024.0 / held;
}

// The whole process's RSS (after the earlier phases of this run) while `held`
// messages of `body_bytes` are held.
long rss_holding(asio::io_context& io, std::shared_ptr<sqs::SqsClient> client, int held,
                 std::size_t body_bytes) {
  const std::string url = bench::fill_queue(
      io, client, "bench-rss",
      std::vector<std::string>(static_cast<std::size_t>(held) + 100, std::string(body_bytes, 'x')));
  return hold(url, held).after_kib;
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
  // The emulator's JIT warms up on its first drain: an untimed one, so that the first
  // contender (the bare client) does not pay for it.
  bench::ceiling(io, client, fill_queue(io, client, "bench-warm-up", count), count, receives);
  const std::string url1 = fill_queue(io, client, "bench-ceiling", count);
  const bench::Drain raw = bench::ceiling(io, client, url1, count, receives);
  const double raw_rate = raw.messages_per_second;
  std::printf("%-34s %10.0f msg/s  %8.2f us CPU/msg  %6.0f requests/1000 msgs\n",
              "ceiling (receive+delete, no work)", raw_rate, raw.cpu_us_per_message,
              raw.requests_per_1000);
  data("ceiling_rate", raw_rate);
  data("ceiling_cpu_us", raw.cpu_us_per_message);
  data("ceiling_requests_per_1000", raw.requests_per_1000);
  for (const int workers : {0, 4}) {
    const std::string url = fill_queue(io, client, "bench-container", count);
    const Result box = container_drain(url, count, receives, workers);
    const double rate = count / box.seconds, cpu_us = box.cpu / count * 1e6;
    const std::string label = workers ? "container, 4 workers" : "container, inline";
    std::printf("%-34s %10.0f msg/s  %8.2f us CPU/msg  %6.0f requests/1000 msgs\n",
                ("sluice " + label + " (no-op)").c_str(), rate, cpu_us, box.requests_per_1000);
    std::printf("%-34s %10.2f rate, %.2f CPU per message\n", "  against the ceiling",
                rate / raw_rate, cpu_us / raw.cpu_us_per_message);
    const std::string key = workers ? "workers" : "inline";
    data(key + "_rate", rate);
    data(key + "_cpu_us", cpu_us);
    data(key + "_requests_per_1000", box.requests_per_1000);
  }
  if (std::getenv("BENCH_SKIP_EXTRAS")) return 0;
  const double bytes = memory_per_in_flight(io, client, 5000);
  std::printf("%-34s %10.0f bytes (5000 held, ~300 B bodies)\n", "memory per in-flight message",
              bytes);
  data("bytes_per_held_message", bytes);
  const long base = test::rss_kib();
  std::printf("%-34s %10ld KiB\n", "RSS before holding", base);
  data("rss_base_kib", static_cast<double>(base));
  for (const int held : {1000, 10000}) {
    const long rss = rss_holding(io, client, held, 1024);
    std::printf("%-34s %10ld KiB (max_in_flight %d, 1 KiB bodies)\n", "RSS holding", rss, held);
    data("rss_kib_" + std::to_string(held), static_cast<double>(rss));
  }
  const int quick = 8000;
  const double alone = head_of_line(io, client, quick, false);
  const double behind = head_of_line(io, client, quick, true);
  std::printf("%-34s %10.2f s alone, %.2f s with one 10 s message: %.1f %% slower\n",
              "head-of-line (8000 x 1 ms, 16 workers)", alone, behind, (behind / alone - 1) * 100);
  data("hol_alone_s", alone);
  data("hol_with_slow_s", behind);
  return 0;
}
