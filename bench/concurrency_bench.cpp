// `concurrency: auto` against a sweep of fixed settings, in one run, with latency
// injected between the container and the emulator (the HTTP fault proxy holds every
// request L ms). Every contender is timed the same way, from outside: an observer
// with its own client reads the queue's counts every 20 ms (straight from the
// emulator), and a contender's rate is the messages that left the queue over its
// window (those fed in by a feeder that keeps the queue at 60,000 for every contender,
// minus the growth of its count). Fixed settings are measured after a 2 s warm-up; auto runs three
// times as long, measured over its whole run (its search included) and its last third. Then a slow
// consumer (handlers of 2 ms on 4 threads): auto must not over-receive. Usage: bench_concurrency
// [seconds_per_run=6] [latencies_ms=0,20,50 | none] (BENCH_LOG=1: the container's log lines,
// receivers_up/down among them; BENCH_AUTO_ONLY=1: no fixed settings)
#include <spdlog/spdlog.h>

#include <atomic>
#include <cstdio>
#include <sstream>
#include <thread>

#include "bench_support.hpp"
#include "sluice/container.hpp"
#include "sluice/sqs/source.hpp"
#include "support/fault_proxy.hpp"

namespace asio = boost::asio;
using namespace sluice;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

// The queue's total (visible + in flight), read straight from the emulator.
class Observer {
 public:
  explicit Observer(std::string url) : url_(std::move(url)) {
    thread_ = std::thread([this] {
      asio::io_context io;
      sqs::SqsClient client(io.get_executor(), test::emulator_client_options());
      while (!stop_) {
        try {
          const auto a = test::run(io, client.get_queue_attributes(url_));
          total_ = std::stol(a.at("ApproximateNumberOfMessages")) +
                   std::stol(a.at("ApproximateNumberOfMessagesNotVisible"));
          visible_ = std::stol(a.at("ApproximateNumberOfMessages"));
        } catch (const std::exception&) {
        }
        std::this_thread::sleep_for(20ms);
      }
    });
    while (total_ < 0) std::this_thread::sleep_for(5ms);
  }
  ~Observer() {
    stop_ = true;
    thread_.join();
  }
  long total() const { return total_; }
  long visible() const { return visible_; }

 private:
  std::string url_;
  std::atomic<bool> stop_{false};
  std::atomic<long> total_{-1}, visible_{-1};
  std::thread thread_;
};

struct Outcome {
  double rate = 0;          // messages/s that left the queue in the window
  double rate_settled = 0;  // over the last third
  int receives_final = 0, receives_peak = 0;
  double receive_requests_per_1000 = 0;
};

void top_up(asio::io_context& io, const std::shared_ptr<sqs::SqsClient>& client,
            const std::string& url, const Observer& observer, long wanted) {
  const std::string body =
      R"({"skuId":"SKU-1","locationId":"LOC-1","eventType":"ADJUST","quantity":3,"pad":")" +
      std::string(200, 'x') + "\"}";
  sqs::Publisher publisher(client, url);
  // The count can still fall after a stop (its last deletes): read it again until met.
  for (long have = observer.total(); have < wanted; have = observer.total()) {
    for (long sent = 0; sent < wanted - have; sent += 1000) {
      std::vector<sqs::SendMessageEntry> entries(
          static_cast<std::size_t>(std::min<long>(1000, wanted - have - sent)));
      for (auto& e : entries) e.body = body;
      test::run(io, publisher.send_batch(std::move(entries)));
    }
    std::this_thread::sleep_for(200ms);
  }
}

// Keeps the queue near `level` messages while a contender runs: every contender sees
// the same backlog (the emulator's cost per receive grows with the queue's size, so a
// bigger queue for one contender would not be a fair race).
class Feeder {
 public:
  Feeder(std::string url, const Observer& observer, long level) {
    thread_ = std::thread([this, url = std::move(url), &observer, level] {
      asio::io_context io;
      auto client =
          std::make_shared<sqs::SqsClient>(io.get_executor(), test::emulator_client_options());
      sqs::Publisher publisher(client, url);
      const std::string body =
          R"({"skuId":"SKU-1","locationId":"LOC-1","eventType":"ADJUST","quantity":3,"pad":")" +
          std::string(200, 'x') + "\"}";
      while (!stop_) {
        if (observer.total() < level) {
          std::vector<sqs::SendMessageEntry> entries(1000);
          for (auto& e : entries) e.body = body;
          try {
            for (const auto& o : test::run(io, publisher.send_batch(std::move(entries))))
              if (o.ok) ++sent_;
          } catch (const std::exception&) {
          }
        } else {
          std::this_thread::sleep_for(20ms);
        }
      }
    });
  }
  ~Feeder() {
    stop_ = true;
    thread_.join();
  }
  long sent() const { return sent_; }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<long> sent_{0};
  std::thread thread_;
};

constexpr long kBacklog = 60000;  // the queue's size during every run

// `concurrency` is "N" or "auto"; `seconds` of work; the rate over [warmup, end].
Outcome run_contender(const std::string& url, const std::string& proxy_endpoint,
                      const std::string& concurrency, double seconds, Observer& observer,
                      test::HttpFaultProxy& proxy, std::chrono::milliseconds handler_time = 0ms,
                      double warmup = 2.0) {
  ContainerOptions options;
  options.name = "bench-" + concurrency;
  options.max_in_flight = 1000;
  options.worker_threads = handler_time.count() ? 4 : 4;
  parse_concurrency(concurrency, options);
  SqsSourceOptions source;
  source.queue_url = url;
  source.client = test::emulator_client_options();
  source.client.endpoint_url = proxy_endpoint;
  source.poll_wait = 1s;
  Container container(options, make_sqs_source(source), MessageHandler([&](Message&) {
                        if (handler_time.count()) std::this_thread::sleep_for(handler_time);
                      }));
  const auto receives_before = proxy.count("ReceiveMessage");
  const long total_before = observer.total();
  Feeder feeder(url, observer, kBacklog);
  const auto start = Clock::now();
  container.start();
  Outcome out;
  // (t, messages that left the queue: those fed in minus the growth of its total)
  std::vector<std::pair<double, long>> samples;
  while (Clock::now() - start < std::chrono::duration<double>(seconds)) {
    std::this_thread::sleep_for(20ms);
    samples.emplace_back(std::chrono::duration<double>(Clock::now() - start).count(),
                         feeder.sent() - (observer.total() - total_before));
    out.receives_peak = std::max(out.receives_peak, container.stats().concurrent_receives);
  }
  out.receives_final = container.stats().concurrent_receives;
  const auto receives = proxy.count("ReceiveMessage") - receives_before;
  container.stop();
  auto rate_between = [&](double from) {
    auto first = std::find_if(samples.begin(), samples.end(),
                              [&](const auto& s) { return s.first >= from; });
    if (first == samples.end() || first->first >= samples.back().first) return 0.0;
    return static_cast<double>(samples.back().second - first->second) /
           (samples.back().first - first->first);
  };
  out.rate = rate_between(warmup);
  out.rate_settled = rate_between(seconds * 2 / 3);
  const long done = samples.back().second;
  out.receive_requests_per_1000 = done > 0 ? 1000.0 * static_cast<double>(receives) / done : 0;
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? std::atof(argv[1]) : 6.0;
  const double auto_seconds = argc > 3 ? std::atof(argv[3]) : 3 * seconds;
  std::vector<int> latencies{0, 20, 50};
  if (argc > 2) {
    latencies.clear();
    std::stringstream list(argv[2]);
    for (std::string item; std::getline(list, item, ',');)
      if (item != "none") latencies.push_back(std::stoi(item));
  }
  spdlog::set_level(std::getenv("BENCH_LOG") ? spdlog::level::info : spdlog::level::warn);
  asio::io_context io;
  auto client =
      std::make_shared<sqs::SqsClient>(io.get_executor(), test::emulator_client_options());
  std::printf(
      "concurrency benchmark: no-op handler, max_in_flight 1000, poll_wait 1s, %.0f s per fixed "
      "setting (2 s warm-up), %.0f s for auto; latency added to every request by a proxy\n\n",
      seconds, auto_seconds);
  for (const int latency : latencies) {
    test::HttpFaults faults;
    faults.latency = std::chrono::milliseconds(latency);
    test::HttpFaultProxy proxy("127.0.0.1", test::Emulator::shared().port(), faults);
    const std::string url =
        bench::fill_queue(io, client, "bench-conc-" + std::to_string(latency), {});
    Observer observer(url);
    std::printf("latency %d ms\n  %-10s %12s %14s %10s %22s\n", latency, "receives", "msg/s",
                "settled", "final", "receives per 1000 msgs");
    double best = 0;
    int best_level = 0;
    const std::vector<int> levels =
        latency == 0 ? std::vector<int>{1, 2, 4, 8, 16} : std::vector<int>{1, 2, 4, 8, 16, 32, 64};
    for (const int level : levels) {
      // A backlog for the whole run at the fastest rate seen here (about 12,000/s).
      top_up(io, client, url, observer, kBacklog);
      const auto o =
          run_contender(url, proxy.endpoint(), std::to_string(level), seconds, observer, proxy);
      std::printf("  %-10d %12.0f %14s %10d %22.0f\n", level, o.rate, "", o.receives_final,
                  o.receive_requests_per_1000);
      std::fflush(stdout);
      if (o.rate > best) {
        best = o.rate;
        best_level = level;
      }
    }
    top_up(io, client, url, observer, kBacklog);
    const auto a =
        run_contender(url, proxy.endpoint(), "auto", auto_seconds, observer, proxy, 0ms, 0.0);
    std::printf("  %-10s %12.0f %14.0f %10d %22.0f\n", "auto", a.rate, a.rate_settled,
                a.receives_final, a.receive_requests_per_1000);
    std::printf(
        "  best fixed: %d receives, %.0f msg/s; auto: %.2f of it over its whole run (its "
        "search included), %.2f settled (last third), at %d receives (peak %d)\n\n",
        best_level, best, a.rate / best, a.rate_settled / best, a.receives_final, a.receives_peak);
    std::fflush(stdout);
  }
  // A slow consumer: 4 threads x 2 ms per message, about 2,000 messages/s at most.
  {
    test::HttpFaults faults;
    faults.latency = 20ms;
    test::HttpFaultProxy proxy("127.0.0.1", test::Emulator::shared().port(), faults);
    const std::string url = bench::fill_queue(io, client, "bench-conc-slow", {});
    Observer observer(url);
    std::printf("slow consumer (4 threads x 2 ms), latency 20 ms\n  %-10s %12s %10s %10s %22s\n",
                "receives", "msg/s", "final", "peak", "receives per 1000 msgs");
    for (const std::string c : {"16", "auto"}) {
      top_up(io, client, url, observer, kBacklog);
      const auto o =
          run_contender(url, proxy.endpoint(), c, 2 * seconds, observer, proxy, 2ms, seconds);
      std::printf("  %-10s %12.0f %10d %10d %22.0f\n", c.c_str(), o.rate, o.receives_final,
                  o.receives_peak, o.receive_requests_per_1000);
    }
  }
  return 0;
}
