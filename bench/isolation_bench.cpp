// Several pipelines in one process: does one pipeline's trouble slow another? Timed
// from outside. Each scenario is one `sluice run` process (admin.enabled, its own
// metrics port) whose pipeline `healthy` drains COUNT inventory events (20 % duplicates)
// from its SQS queue into PostgreSQL:
//   alone      healthy is the process's only pipeline;
//   frozen-db  beside `other` (SQS into the same PostgreSQL server, through a TCP proxy),
//              whose database stops answering (the proxy holds every byte) once it has
//              written its first rows, with 3,000 more events waiting for it;
//   throttled  beside `other`, whose queue answers through an HTTP proxy that turns
//              half of its requests into ThrottlingException and delays every one by
//              200 ms, with 3,000 events waiting.
// The clock: healthy is paused (POST /pipelines/healthy/pause) while its queue is
// filled and the fault is put in place, then resumed; it stops when healthy's table
// holds every distinct record (polled every 20 ms). Scenarios alternate within a run so
// that the machine's drift spreads over all of them; a first, untimed run warms the
// servers up.
// Usage: bench_isolation [COUNT] [--repeat N]        (30000, 3)
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <thread>

#include "bench_support.hpp"
#include "cli/publish.hpp"
#include "observe.hpp"
#include "support/emulator.hpp"
#include "support/fault_proxy.hpp"
#include "support/pipeline.hpp"
#include "support/process.hpp"

using namespace sluice;
using Clock = std::chrono::steady_clock;

namespace {

int free_port() {
  const auto out = test::run_with_status(
      "python3 -c 'import socket; s=socket.socket(); s.bind((\"127.0.0.1\",0)); "
      "print(s.getsockname()[1])'");
  return std::stoi(out.second);
}

std::string pipeline_yaml(const std::string& name, const std::string& url,
                          const std::string& endpoint, const std::string& dsn,
                          const std::string& table) {
  return "  " + name + ":\n    source:\n      sqs:\n        queue_url: " + url +
         "\n        endpoint_url: " + endpoint +
         "\n        region: us-east-1\n        poll_wait: 1s\n      concurrency: 8\n"
         "      max_in_flight: 1000\n    sink:\n      table: " +
         table + "\n      writers: 4\n      postgres:\n        dsn: " + dsn +
         "\n        query_timeout: 120s\n";
}

bool ctl(const std::string& action, int port) {
  return test::run_with_status(std::string(SLUICE_BINARY) + " ctl " + action +
                               " healthy --url http://127.0.0.1:" + std::to_string(port) +
                               " >/dev/null 2>&1")
             .first == 0;
}

template <class Condition>
bool wait_for(Condition condition, std::chrono::seconds limit) {
  const auto until = Clock::now() + limit;
  while (!condition()) {
    if (Clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

struct Outcome {
  double seconds = 0;
  std::string note;  // what proves the fault happened
};

Outcome run_scenario(const std::string& scenario, int count, int run, boost::asio::io_context& io,
                     const std::shared_ptr<sqs::SqsClient>& client) {
  auto& pg = test::Postgres::shared();
  auto& emulator = test::Emulator::shared();
  const std::string suffix = std::to_string(getpid()) + "_" + std::to_string(run) + "_" +
                             (scenario == "alone"       ? "a"
                              : scenario == "frozen-db" ? "f"
                                                        : "t");
  const std::string healthy_table = "iso_h_" + suffix, other_table = "iso_o_" + suffix;
  const std::string healthy = bench::fill_queue(io, client, "iso-h", {});
  test::TcpFaultProxy database_proxy("127.0.0.1", pg.port());
  test::HttpFaultProxy queue_proxy("127.0.0.1", emulator.port(), {});
  const auto other_events = app::generate_events(3000, 0.0, 0.0, 100 + run);
  const std::string other = bench::fill_queue(io, client, "iso-o", other_events.bodies);
  const int port = free_port();
  std::string yaml =
      "metrics:\n  listen: 127.0.0.1:" + std::to_string(port) +
      "\nadmin:\n  enabled: true\nlogging:\n  level: error\n" +
      "source:\n  shutdown_deadline: 10s\n" + test::kInventoryNormalizeYaml +
      "sink:\n  type: postgres\npipelines:\n" +
      pipeline_yaml("healthy", healthy, emulator.endpoint(), pg.dsn(), healthy_table);
  if (scenario != "alone")
    yaml += pipeline_yaml("other", other,
                          scenario == "throttled" ? queue_proxy.endpoint() : emulator.endpoint(),
                          "host=127.0.0.1 port=" + std::to_string(database_proxy.port()) +
                              " user=postgres dbname=postgres",
                          other_table);
  const std::string config = "/tmp/sluice-iso-" + suffix + ".yaml";
  std::ofstream(config) << yaml;
  const pid_t pid = test::spawn_quiet({SLUICE_BINARY, "run", "--config", config});
  // The database answers again before the stop (the other pipeline's transactions hold
  // its table's locks until then), and the tables go once the process has exited.
  struct Stop {
    pid_t pid;
    std::string config, tables;
    test::TcpFaultProxy& proxy;
    ~Stop() {
      proxy.stall(false);
      ::kill(pid, SIGTERM);
      test::wait_exit(pid);
      std::remove(config.c_str());
      test::Postgres::shared().query("DROP TABLE IF EXISTS " + tables);
    }
  } stop{pid, config, healthy_table + ", " + other_table, database_proxy};
  if (!wait_for([&] { return ctl("pause", port); }, std::chrono::seconds(30)))
    throw std::runtime_error(scenario + ": the pipeline did not start");
  const auto rows = [&](const std::string& table) { return bench::table_rows(pg.dsn(), table); };
  Outcome outcome;
  if (scenario == "frozen-db") {
    if (!wait_for([&] { return rows(other_table) > 0; }, std::chrono::seconds(60)))
      throw std::runtime_error("frozen-db: the other pipeline wrote nothing before the fault");
    database_proxy.stall(true);
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // its writers are stuck
  } else if (scenario == "throttled") {
    test::HttpFaults faults;
    faults.throttling = 0.5;
    faults.latency = std::chrono::milliseconds(200);
    queue_proxy.set_faults(faults);
  }
  const auto events = app::generate_events(count, 0.2, 0.0, 10 + run);
  {
    sqs::Publisher publisher(client, healthy);
    for (std::size_t start = 0; start < events.bodies.size(); start += 1000) {
      std::vector<sqs::SendMessageEntry> entries;
      for (std::size_t i = start; i < std::min(events.bodies.size(), start + 1000); ++i)
        entries.push_back({"", events.bodies[i], {}, {}, {}, {}, {}});
      test::run(io, publisher.send_batch(std::move(entries)));
    }
  }
  const long distinct = static_cast<long>(events.distinct_records);
  const auto started = Clock::now();
  if (!ctl("resume", port)) throw std::runtime_error(scenario + ": resume refused");
  if (!wait_for([&] { return rows(healthy_table) >= distinct; }, std::chrono::seconds(600)))
    throw std::runtime_error(scenario + ": healthy did not drain in 10 minutes");
  outcome.seconds = std::chrono::duration<double>(Clock::now() - started).count();
  if (scenario == "frozen-db") {
    outcome.note = std::to_string(database_proxy.stalled_chunks()) + " chunks held, other wrote " +
                   std::to_string(rows(other_table)) + " of 3000";
  } else if (scenario == "throttled") {
    const auto seen = queue_proxy.counts();
    const auto throttled = seen.find("fault:ThrottlingException");
    outcome.note = std::to_string(throttled == seen.end() ? 0 : throttled->second) +
                   " throttled, other wrote " + std::to_string(rows(other_table)) + " of 3000";
  }
  return outcome;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  int count = 30000, repeat = 3;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--repeat") == 0 && i + 1 < argc)
      repeat = std::atoi(argv[++i]);
    else if (std::atoi(argv[i]) > 0)
      count = std::atoi(argv[i]);
    else {
      std::fprintf(stderr, "usage: %s [COUNT] [--repeat N]\n", argv[0]);
      return 2;
    }
  }
  if (repeat < 1) {
    std::fprintf(stderr, "bench_isolation: --repeat expects a positive number\n");
    return 2;
  }
  spdlog::set_level(spdlog::level::err);
  setenv("AWS_ACCESS_KEY_ID", "AKIDLOCAL", 1);  // placeholders: the emulator checks none
  setenv("AWS_SECRET_ACCESS_KEY", "local", 1);
  setenv("AWS_EC2_METADATA_DISABLED", "true", 1);
  boost::asio::io_context io;
  auto client =
      std::make_shared<sqs::SqsClient>(io.get_executor(), test::emulator_client_options());
  const std::vector<std::string> scenarios{"alone", "frozen-db", "throttled"};
  std::map<std::string, std::vector<double>> seconds;
  try {
    // Not timed: the first tables, connections and caches of the servers.
    run_scenario("alone", std::min(count, 5000), 0, io, client);
    for (int run = 1; run <= repeat; ++run)
      for (const auto& scenario : scenarios) {
        const auto outcome = run_scenario(scenario, count, run, io, client);
        seconds[scenario].push_back(outcome.seconds);
        std::printf("run %d  %-10s %7.2f s  %s\n", run, scenario.c_str(), outcome.seconds,
                    outcome.note.c_str());
        std::fflush(stdout);
      }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_isolation: %s\n", e.what());
    return 1;
  }
  const double alone = median(seconds["alone"]);
  std::printf("\nhealthy pipeline, %d events into PostgreSQL (median of %d, range)\n", count,
              repeat);
  std::printf("| healthy pipeline | seconds | msg/s | rate against alone |\n|---|---|---|---|\n");
  for (const auto& scenario : scenarios) {
    const auto& v = seconds[scenario];
    const double m = median(v);
    std::printf("| %s | %.2f (%.2f-%.2f) | %.0f | %.2f |\n", scenario.c_str(), m,
                *std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end()),
                count / m, alone / m);
  }
  return 0;
}
