// End-to-end pipeline benchmark, one run, one emulator, one PostgreSQL:
//   1. ceiling: receive + delete with no processing (as in bench_drain);
//   2. sluice run into PostgreSQL, batched writes (batch 100);
//   3. sluice run into PostgreSQL, per-record writes (batch 1), what every seed does;
//   4. (optional) the Node peer, bench/node-peer: sqs-consumer + pg, same work.
// Usage: bench_pipeline [messages] [--node]
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <cstdio>
#include <cstring>
#include <thread>

#include "app/config.hpp"
#include "app/publish.hpp"
#include "app/run.hpp"
#include "bench_support.hpp"
#include "sluice/sqs/client.hpp"
#include "sluice/sqs/publisher.hpp"
#include "support/emulator.hpp"
#include "support/local_sqs.hpp"
#include "support/run.hpp"

namespace asio = boost::asio;
using namespace sluice;
using Clock = std::chrono::steady_clock;

namespace {

struct Bench {
  asio::io_context io;
  std::shared_ptr<sqs::SqsClient> client =
      std::make_shared<sqs::SqsClient>(io.get_executor(), test::emulator_client_options());
  std::string fill(const std::string& prefix, const std::vector<std::string>& bodies,
                   int fifo_groups = 0) {
    return bench::fill_queue(io, client, prefix, bodies, fifo_groups);
  }
};

std::string config_yaml(const std::string& url, const std::string& dsn, const std::string& table,
                        int batch, int writers) {
  return "source:\n  queue_url: " + url +
         "\n  endpoint_url: " + test::Emulator::shared().endpoint() +
         "\n  region: us-east-1\n  poll_wait: 1s\n  concurrency: " +
         std::string(std::getenv("BENCH_RECEIVES") ? std::getenv("BENCH_RECEIVES") : "8") +
         "\n  max_in_flight: " +
         std::string(std::getenv("BENCH_INFLIGHT") ? std::getenv("BENCH_INFLIGHT") : "1000") +
         "\n  worker_threads: " +
         std::string(std::getenv("BENCH_WORKERS") ? std::getenv("BENCH_WORKERS") : "0") + "\n" +
         test::inventory_stages_yaml() + "sink:\n  type: postgres\n  table: " + table +
         "\n  batch_size: " + std::to_string(batch) + "\n  writers: " + std::to_string(writers) +
         "\n  postgres:\n    dsn: " + dsn +
         "\n"
         "metrics:\n  listen: ''\nlogging:\n  level: error\n";
}

}  // namespace

int main(int argc, char** argv) {
  const int count = argc > 1 ? std::atoi(argv[1]) : 20000;
  const bool node = argc > 2 && std::strcmp(argv[2], "--node") == 0;
  spdlog::set_level(spdlog::level::err);
  setenv("AWS_ACCESS_KEY_ID", "AKIDLOCAL", 1);
  setenv("AWS_SECRET_ACCESS_KEY", "local", 1);
  auto& pg = test::Postgres::shared();
  Bench bench;
  const auto events = app::generate_events(count, 0.2, 0.0, 11);
  std::printf(
      "pipeline benchmark: %d inventory events (%zu distinct), emulator + PostgreSQL 15 on "
      "loopback\n",
      count, events.distinct_records);
  std::printf("%-44s %10s %14s %s\n", "contender", "msg/s", "CPU us/msg", "rows");

  const auto [ceiling_rate, ceiling_cpu, ceiling_requests] = sluice::bench::ceiling(
      bench.io, bench.client, bench.fill("pb-ceiling", events.bodies), count, 8);
  std::printf("%-44s %10.0f %14.1f %s\n", "ceiling: receive+delete, no work", ceiling_rate,
              ceiling_cpu, "-");

  auto sluice_run = [&](const char* label, int batch, int writers, int fifo_groups = 0) {
    const std::string url = bench.fill("pb-sluice", events.bodies, fifo_groups);
    const std::string table = "bench_" + std::to_string(batch) + "_" + std::to_string(fifo_groups) +
                              "_" + std::to_string(getpid());
    const auto config = app::parse_config(config_yaml(url, pg.dsn(), table, batch, writers));
    app::RunOptions options;
    options.until_drained = true;
    options.drained_for = std::chrono::milliseconds(600);
    options.quiet = true;
    app::RunSummary summary;
    app::run_pipeline(config, options, summary);
    const double rate = static_cast<double>(summary.received) / summary.active_seconds;
    std::printf("%-44s %10.0f %14.1f %llu  (receive %.1f ms, batch %.0f in %.1f ms)\n", label, rate,
                summary.cpu_seconds / summary.received * 1e6,
                static_cast<unsigned long long>(summary.records_in_sink), summary.poll_latency_ms,
                summary.sink_batch, summary.sink_latency_ms);
    return rate;
  };
  const int batch = std::getenv("BENCH_BATCH") ? std::atoi(std::getenv("BENCH_BATCH")) : 100;
  const int writers = std::getenv("BENCH_WRITERS") ? std::atoi(std::getenv("BENCH_WRITERS")) : 4;
  const std::string label =
      "sluice run -> PostgreSQL, batch " + std::to_string(batch) + " x" + std::to_string(writers);
  const double batched = sluice_run(label.c_str(), batch, writers);
  const double single = sluice_run("sluice run -> PostgreSQL, per-record (batch 1)", 1, 16);
  std::printf("%-44s %10.2f\n", "ratio batched / ceiling", batched / ceiling_rate);
  std::printf("%-44s %10.2f\n", "ratio batched / per-record", batched / single);

  // FIFO, 20 message groups: each group in order into the database, groups in parallel.
  const int groups = 20;
  const auto [fifo_ceiling_rate, fifo_ceiling_cpu, fifo_ceiling_requests] = sluice::bench::ceiling(
      bench.io, bench.client, bench.fill("pb-fifo-ceiling", events.bodies, groups), count, 8);
  std::printf("%-44s %10.0f %14.1f %s\n", "FIFO ceiling (20 groups): receive+delete",
              fifo_ceiling_rate, fifo_ceiling_cpu, "-");
  const std::string fifo_label = "sluice run FIFO (20 groups), batch " + std::to_string(batch) +
                                 " x" + std::to_string(writers);
  const double fifo = sluice_run(fifo_label.c_str(), batch, writers, groups);
  std::printf("%-44s %10.2f\n", "ratio FIFO / FIFO ceiling", fifo / fifo_ceiling_rate);
  std::printf("%-44s %10.2f\n", "ratio FIFO / standard (batched)", fifo / batched);

  if (node) {
    const std::string url = bench.fill("pb-node", events.bodies);
    const std::string table = "bench_node_" + std::to_string(getpid());
    const std::string cmd = std::string(SLUICE_SOURCE_DIR) +
                            "/tools/emulator/node_modules/.bin/node " + SLUICE_SOURCE_DIR +
                            "/bench/node-peer/consumer.mjs " + url + " " +
                            test::Emulator::shared().endpoint() + " '" + pg.dsn() + "' " + table +
                            " " + std::to_string(count);
    std::fflush(stdout);
    if (std::system(cmd.c_str()) != 0)
      std::printf("node peer failed (run: cd bench/node-peer && npm ci)\n");
  }
  return 0;
}
