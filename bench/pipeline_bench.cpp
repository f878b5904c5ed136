// SQS into PostgreSQL, every contender timed the same way from outside (bench/observe.hpp):
// each is spawned as its own process on a queue holding the same COUNT inventory events;
// an observer polls the queue's attributes (ApproximateNumberOfMessages, ...NotVisible,
// ...Delayed) and the table every 20 ms and stops the clock when the queue is empty and
// the table holds every distinct record. CPU and peak RSS are the child's own (wait4,
// VmHWM); the emulator's and PostgreSQL's CPU during the run are shown beside them.
// One emulator, one PostgreSQL 15 (fsync off), same run:
//   ceiling            bench_sqs_raw: 8 receive loops, delete each batch, no work;
//   ceiling-db         bench_sqs_raw writing the very rows the pipeline writes (worked out
//                      here with Sluice's transform, looked up by MD5OfBody; 4 connections,
//                      100-row INSERTs as the sink sends them, delete after the write,
//                      1,000 held), but no
//                      decoding, normalizing or hashing: "db ceil." is the share of it
//                      each writing contender reaches;
//   ceiling-db-values  the same with the multi-row VALUES statement the sink sent
//                      before (3 parameters per row, parsed and planned each time);
//   ceiling-db-select-first  the same, deduplicated select-then-insert (seed 001's
//                      rejected design: the batch's hashes looked up, the others inserted);
//   ceiling-db-copy    the same rows by binary COPY into a temporary staging table, then
//                      INSERT ... SELECT ... ON CONFLICT DO NOTHING RETURNING (the issue's
//                      candidate for PostgreSQL's CPU per record);
//   ceiling-db-per-record, ceiling-db-select-first-per-record  insert-first and
//                      select-then-insert with one record per statement, as seed 001 ran
//                      them (4 connections, no batch wait);
//   sluice run         into PostgreSQL, batch 100 x 4 writers (the defaults of a config);
//   sluice per-record  batch 1 on 16 writers, one write per message (the usual style of a
//                      hand-written consumer);
//   FIFO ceiling and sluice run FIFO on 20 message groups;
//   --node: the Node peers (bench/node-peer/consumer.mjs): 8 sqs-consumer instances,
//           and 16 loops on one @aws-sdk client, each with a pg pool of 8.
// Usage: bench_pipeline [COUNT] [--node] [--repeat N] [--pin] [--requests]
//   --pin       the emulator on CPU 0; PostgreSQL, the contender and this harness on CPU
//               1: the queue server is never starved by the consumer it serves.
//   --requests  each contender talks to the emulator through a counting proxy (in this
//               process), and its SQS requests per 1,000 messages are printed, up to the
//               clock's stop; the proxy's hop costs time and CPU: not a timing run.
// Environment: BENCH_DB_LATENCY_MS (0: PostgreSQL direct; else a proxy adds it each way),
// BENCH_RECEIVES (8), BENCH_INFLIGHT (1000), BENCH_WORKERS (0),
// BENCH_BATCH (100), BENCH_WRITERS (4) for the sluice contenders; BENCH_LOG_LEVEL (error),
// BENCH_ONLY=ID,... (only these contenders: ceiling, ceiling-db, ceiling-db-values,
// ceiling-db-select-first, ceiling-db-copy, ceiling-db-per-record,
// ceiling-db-select-first-per-record, sluice,
// sluice-per-record, node-sqs-consumer, node-pool, fifo-ceiling, fifo-ceiling-db, sluice-fifo),
// BENCH_KEEP_LOGS=DIR
// (keep each contender's output there), BENCH_WRAP (a profiler command in front of sluice, e.g.
// "/usr/bin/perf record -g -o /tmp/sluice.perf --").
#include <sched.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include "bench_support.hpp"
#include "cli/publish.hpp"
#include "common/crypto.hpp"
#include "config/config.hpp"
#include "observe.hpp"
#include "pipeline/transform.hpp"
#include "rows_file.hpp"
#include "sluice/sqs/client.hpp"
#include "support/emulator.hpp"
#include "support/fault_proxy.hpp"
#include "support/local_sqs.hpp"
#include "support/run.hpp"

using namespace sluice;

namespace {

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

std::string config_yaml(const std::string& url, const std::string& endpoint, const std::string& dsn,
                        const std::string& table, int batch, int writers) {
  return "source:\n  sqs:\n    queue_url: " + url + "\n    endpoint_url: " + endpoint +
         "\n    region: us-east-1\n    poll_wait: 1s\n  concurrency: " +
         env_or("BENCH_RECEIVES", "8") + "\n  max_in_flight: " + env_or("BENCH_INFLIGHT", "1000") +
         "\n  worker_threads: " + env_or("BENCH_WORKERS", "0") + "\n" +
         test::inventory_stages_yaml() + "sink:\n  type: postgres\n  table: " + table +
         "\n  batch_size: " + std::to_string(batch) + "\n  writers: " + std::to_string(writers) +
         "\n  postgres:\n    dsn: " + dsn +
         "\n"
         "metrics:\n  listen: ''\nlogging:\n  level: " +
         env_or("BENCH_LOG_LEVEL", "error") + "\n";
}

// Every thread of `pid` onto one CPU.
void pin(pid_t pid, int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  for (const auto& task :
       std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task"))
    sched_setaffinity(std::stoi(task.path().filename()), sizeof set, &set);
}

}  // namespace

static int run_bench(int argc, char** argv) {
  int count = 30000, repeat = 1;
  bool node = false, pinned = false, count_requests = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--node") == 0)
      node = true;
    else if (std::strcmp(argv[i], "--pin") == 0)
      pinned = true;
    else if (std::strcmp(argv[i], "--requests") == 0)
      count_requests = true;
    else if (std::strcmp(argv[i], "--repeat") == 0 && i + 1 < argc)
      repeat = std::atoi(argv[++i]);
    else if (std::atoi(argv[i]) > 0)
      count = std::atoi(argv[i]);
    else {
      std::fprintf(stderr, "usage: %s [COUNT] [--node] [--repeat N] [--pin] [--requests]\n",
                   argv[0]);
      return 2;
    }
  }
  // A mistyped contender or delay would run something else and look like a result.
  static const std::set<std::string> kContenders = {"ceiling",
                                                    "ceiling-db",
                                                    "ceiling-db-values",
                                                    "ceiling-db-select-first",
                                                    "ceiling-db-copy",
                                                    "ceiling-db-per-record",
                                                    "ceiling-db-select-first-per-record",
                                                    "sluice",
                                                    "sluice-per-record",
                                                    "node-sqs-consumer",
                                                    "node-pool",
                                                    "fifo-ceiling",
                                                    "fifo-ceiling-db",
                                                    "sluice-fifo"};
  std::stringstream only(env_or("BENCH_ONLY", ""));
  for (std::string id; std::getline(only, id, ',');)
    if (!kContenders.count(id)) {
      std::fprintf(stderr, "bench_pipeline: BENCH_ONLY names '%s', not a contender\n", id.c_str());
      return 2;
    }
  const std::string latency = env_or("BENCH_DB_LATENCY_MS", "0");
  if (latency.empty() || latency.find_first_not_of("0123456789") != std::string::npos) {
    std::fprintf(stderr, "bench_pipeline: BENCH_DB_LATENCY_MS is '%s', expected milliseconds\n",
                 latency.c_str());
    return 2;
  }
  spdlog::set_level(spdlog::level::err);
  // Inherited by every contender; the emulator accepts any signature (placeholders).
  setenv("AWS_ACCESS_KEY_ID", "AKIDLOCAL", 1);
  setenv("AWS_SECRET_ACCESS_KEY", "local", 1);
  setenv("AWS_EC2_METADATA_DISABLED", "true", 1);
  if (pinned) pin(getpid(), 1);  // before PostgreSQL starts: it inherits CPU 1
  auto& pg = test::Postgres::shared();
  auto& emulator = test::Emulator::shared();
  if (pinned) pin(emulator.pid(), 0);
  boost::asio::io_context io;
  auto client =
      std::make_shared<sqs::SqsClient>(io.get_executor(), test::emulator_client_options());
  const auto events = app::generate_events(count, 0.2, 0.0, 11);
  const long distinct = static_cast<long>(events.distinct_records);
  // The database ceiling writes the very rows the pipeline writes: each body's record,
  // worked out here with Sluice's own transform, keyed by the body's MD5 (SQS's MD5OfBody).
  const std::string rows_file = "/tmp/sluice-bench-rows-" + std::to_string(getpid()) + ".tsv";
  const bench::RemoveOnExit remove_rows{rows_file};
  bench::write_rows_file(
      config_yaml("http://127.0.0.1:1/0/q", emulator.endpoint(), pg.dsn(), "t", 100, 4),
      events.bodies, rows_file);
  const std::string bin = SLUICE_BINARY_DIR, root = SLUICE_SOURCE_DIR;
  const std::string node_bin = root + "/tools/emulator/node_modules/.bin/node";
  const int batch = std::atoi(env_or("BENCH_BATCH", "100").c_str());
  const int writers = std::atoi(env_or("BENCH_WRITERS", "4").c_str());

  std::printf(
      "pipeline benchmark: %d inventory events (%ld distinct), SQS emulator + PostgreSQL 15 "
      "(fsync off) on loopback, every contender spawned and timed from outside%s\n",
      count, distinct,
      pinned ? "; pinned: emulator on CPU 0, PostgreSQL + contender + harness on CPU 1" : "");
  std::printf("%-4s %-44s %8s %8s %11s %8s %8s %8s %14s\n", "run", "contender", "seconds", "msg/s",
              "CPU us/msg", "RSS MiB", "ceiling", "db ceil.", "emulator/db s");
  {
    // The emulator's JIT warms up on its first drains; no contender should pay for that.
    const std::string url = bench::fill_queue(io, client, "pb-warm-up", events.bodies);
    bench::Watch watch;
    watch.queue_depth = [&] {
      return std::atol(
          test::run(io, client->get_queue_attributes(url))["ApproximateNumberOfMessages"].c_str());
    };
    bench::observe({bin + "/bench_sqs_raw", emulator.endpoint(), url, std::to_string(count), "8"},
                   watch);
  }
  auto sql = [&](const std::string& statement) {
    PGconn* conn = PQconnectdb(pg.dsn().c_str());
    PQclear(PQexec(conn, statement.c_str()));
    PQfinish(conn);
  };
  // Where the contenders write: PostgreSQL, or a proxy in front of it that holds every
  // chunk BENCH_DB_LATENCY_MS each way (a network between them; the harness's own
  // queries go direct).
  std::string writes_dsn = pg.dsn();
  std::optional<test::TcpFaultProxy> db_network;
  if (const int ms = std::atoi(latency.c_str()); ms > 0) {
    db_network.emplace("127.0.0.1", pg.port());
    db_network->set_latency(std::chrono::milliseconds(ms));
    writes_dsn = "host=127.0.0.1 port=" + std::to_string(db_network->port()) +
                 " user=postgres dbname=postgres";
    std::printf("PostgreSQL behind a proxy adding %d ms each way\n", ms);
  }
  // Where the contenders send their SQS requests: the emulator, or a counting proxy.
  std::string endpoint = emulator.endpoint();
  for (int run = 1; run <= repeat; ++run) {
    const std::string tag = std::to_string(getpid()) + "_" + std::to_string(run);
    double ceiling_rate = 0, fifo_ceiling_rate = 0, db_ceiling_rate = 0, fifo_db_ceiling_rate = 0;
    auto contend = [&](const char* id, const std::string& label, int fifo_groups,
                       const std::function<std::vector<std::string>(
                           const std::string& url, const std::string& table)>& command,
                       long expected_rows /* < 0: writes nothing */) {
      const bool writes = expected_rows >= 0;
      const std::string only = env_or("BENCH_ONLY", "");
      if (!only.empty() &&
          ("," + only + ",").find("," + std::string(id) + ",") == std::string::npos)
        return;
      const std::string url =
          bench::fill_queue(io, client, "pb-" + std::string(id), events.bodies, fifo_groups);
      std::string table;
      if (writes) {
        table = "bench_" + std::string(id) + "_" + tag;
        std::replace(table.begin(), table.end(), '-', '_');
      }
      bench::Watch watch;
      const std::vector<std::string> names = {"ApproximateNumberOfMessages",
                                              "ApproximateNumberOfMessagesNotVisible",
                                              "ApproximateNumberOfMessagesDelayed"};
      watch.queue_depth = [&] {
        const auto attributes = test::run(io, client->get_queue_attributes(url, names));
        long depth = 0;
        for (const auto& [name, value] : attributes) depth += std::atol(value.c_str());
        return depth;
      };
      watch.server_pid = emulator.pid();
      watch.database_pid = pg.pid();
      watch.dsn = pg.dsn();
      watch.table = table;
      watch.expected_rows = expected_rows;
      std::optional<test::HttpFaultProxy> counter;
      if (count_requests) {
        counter.emplace("127.0.0.1", emulator.port(), test::HttpFaults{});
        endpoint = counter->endpoint();
      }
      sql("CHECKPOINT");  // the last contender's dirty pages are not this one's cost
      const auto r = bench::observe(command(url, table), watch);
      if (counter) {
        // What the contender asked for up to the clock's stop (its shutdown is not counted).
        auto per_1000 = [&](const char* action) { return counter->count(action) * 1000.0 / count; };
        const double receives = per_1000("ReceiveMessage"),
                     batches = per_1000("DeleteMessageBatch"), singles = per_1000("DeleteMessage"),
                     visibility = per_1000("ChangeMessageVisibilityBatch") +
                                  per_1000("ChangeMessageVisibility");
        const double total = receives + batches + singles + visibility;
        std::printf(
            "     %s: SQS requests per 1,000 messages %.0f (receive %.0f, delete batch %.0f, "
            "delete %.0f, visibility %.0f)\n",
            id, total, receives, batches, singles, visibility);
        std::printf(
            "DATA requests run=%d id=%s per_1000=%.1f receive=%.1f delete_batch=%.1f delete=%.1f "
            "visibility=%.1f\n",
            run, id, total, receives, batches, singles, visibility);
        counter.reset();
        endpoint = emulator.endpoint();
      }
      if (writes) sql("DROP TABLE IF EXISTS \"" + table + "\"");  // no autovacuum later
      const double rate = count / r.seconds;
      if (std::string(id) == "ceiling") ceiling_rate = rate;
      if (std::string(id) == "fifo-ceiling") fifo_ceiling_rate = rate;
      if (std::string(id) == "ceiling-db") db_ceiling_rate = rate;
      if (std::string(id) == "fifo-ceiling-db") fifo_db_ceiling_rate = rate;
      const double ceiling = fifo_groups ? fifo_ceiling_rate : ceiling_rate;
      const std::string problem = bench::exit_problem(r.exit_status);
      // Against the ceiling with the same database load and the same kind of queue.
      const double db_ceiling = fifo_groups ? fifo_db_ceiling_rate : db_ceiling_rate;
      const double db_ratio = writes && db_ceiling > 0 ? rate / db_ceiling : 0;
      const bool wrong = (writes && r.rows != expected_rows) || !problem.empty();
      char db_share[16] = "-";
      if (db_ratio > 0) std::snprintf(db_share, sizeof db_share, "%.2f", db_ratio);
      std::printf("%-4d %-44s %8.2f %8.0f %11.1f %8.1f %8.2f %8s %6.1f/%-6.1f%s\n", run,
                  label.c_str(), r.seconds, rate, r.cpu_seconds / count * 1e6, r.rss_mib,
                  ceiling > 0 ? rate / ceiling : 0.0, db_share, r.server_cpu, r.database_cpu,
                  !problem.empty()                    ? ("  ENDED BADLY: " + problem).c_str()
                  : writes && r.rows != expected_rows ? "  ROWS WRONG"
                                                      : "");
      std::printf(
          "DATA pipeline run=%d id=%s rate=%.1f cpu_us=%.2f rss_mib=%.1f ratio=%.3f "
          "db_ratio=%.3f emulator_cpu_s=%.2f database_cpu_s=%.2f rows_ok=%d\n",
          run, id, rate, r.cpu_seconds / count * 1e6, r.rss_mib, ceiling > 0 ? rate / ceiling : 0.0,
          db_ratio, r.server_cpu, r.database_cpu, wrong ? 0 : 1);
      std::fflush(stdout);
    };
    auto raw = [&](const std::string& url, const std::string&) {
      return std::vector<std::string>{bin + "/bench_sqs_raw", endpoint, url, std::to_string(count),
                                      "8"};
    };
    auto raw_db = [&](const char* form, int batch_wait_ms = 20, int rows_per_insert = 100) {
      return [&, form, batch_wait_ms, rows_per_insert](const std::string& url,
                                                       const std::string& table) {
        return std::vector<std::string>{bin + "/bench_sqs_raw",
                                        endpoint,
                                        url,
                                        std::to_string(count),
                                        "8",
                                        writes_dsn,
                                        table,
                                        rows_file,
                                        form,
                                        std::to_string(batch_wait_ms),
                                        std::to_string(rows_per_insert)};
      };
    };
    auto sluice = [&](int batch_size, int writer_count) {
      return [&, batch_size, writer_count](const std::string& url, const std::string& table) {
        const std::string config = "/tmp/sluice-bench-" + table + ".yaml";
        std::ofstream(config) << config_yaml(url, endpoint, writes_dsn, table, batch_size,
                                             writer_count);
        std::vector<std::string> argv;
        // BENCH_WRAP: a profiler in front of sluice, e.g. "/usr/bin/perf record -o F --".
        std::istringstream wrap(env_or("BENCH_WRAP", ""));
        for (std::string word; wrap >> word;) argv.push_back(word);
        for (const char* word : {SLUICE_BINARY, "run", "--until-drained", "--config"})
          argv.push_back(word);
        argv.push_back(config);
        return argv;
      };
    };
    auto node_peer = [&](const char* mode) {
      return [&, mode](const std::string& url, const std::string& table) {
        return std::vector<std::string>{node_bin,
                                        "--no-warnings",
                                        root + "/bench/node-peer/consumer.mjs",
                                        mode,
                                        url,
                                        endpoint,
                                        pg.dsn(),
                                        table};
      };
    };
    contend("ceiling", "ceiling: bare client, receive+delete, no work", 0, raw, -1);
    contend("ceiling-db", "ceiling with the same PostgreSQL writes", 0, raw_db("unnest"), distinct);
    // The statement the sink sent before 2026-12-04, for PostgreSQL's CPU per record.
    contend("ceiling-db-values", "ceiling-db, multi-row VALUES statements", 0, raw_db("values"),
            distinct);
    // Seed 001's claim: select-then-insert costs "~50%" of insert-first's throughput.
    contend("ceiling-db-select-first", "ceiling-db, select-then-insert", 0, raw_db("select-first"),
            distinct);
    // The candidate: binary COPY into a temporary table, then INSERT ... SELECT.
    contend("ceiling-db-copy", "ceiling-db, COPY into a staging table", 0, raw_db("copy-staging"),
            distinct);
    // Seed 001's design as it ran: one record per statement (4 connections), the lookup
    // a round trip of its own; BENCH_DB_LATENCY_MS puts a network between them.
    contend("ceiling-db-per-record", "ceiling-db, one record per statement", 0,
            raw_db("unnest", 0, 1), distinct);
    contend("ceiling-db-select-first-per-record", "ceiling-db, select-then-insert per record", 0,
            raw_db("select-first", 0, 1), distinct);
    contend("sluice", "sluice run, batch " + std::to_string(batch) + " x" + std::to_string(writers),
            0, sluice(batch, writers), distinct);
    contend("sluice-per-record", "sluice run, per-record (batch 1 x16)", 0, sluice(1, 16),
            distinct);
    if (node) {
      contend("node-sqs-consumer", "node sqs-consumer x8 + pg", 0, node_peer("sqs-consumer"),
              distinct);
      contend("node-pool", "node @aws-sdk 16 loops + pg", 0, node_peer("pool"), distinct);
    }
    contend("fifo-ceiling", "FIFO ceiling (20 groups), no work", 20, raw, -1);
    // The FIFO database ceiling: the bare client writing the same rows on the FIFO queue.
    // A group has one message out at a time there (the emulator's FIFO), each deleted
    // after its row is written: every group's rows land in order. Its writers do not
    // wait to fill a batch, as the pipeline's order-keeping writer does not for ordered
    // records (a batch of a FIFO queue's messages rarely fills: waiting 20 ms for one
    // would hold every group up by as much).
    contend("fifo-ceiling-db", "FIFO ceiling (20 groups), same writes", 20, raw_db("unnest", 0),
            distinct);
    contend("sluice-fifo",
            "sluice run FIFO (20 groups), batch " + std::to_string(batch) + " x" +
                std::to_string(writers),
            20, sluice(batch, writers), distinct);
  }
  for (const auto& entry : std::filesystem::directory_iterator("/tmp"))
    if (entry.path().filename().string().rfind("sluice-bench-bench_", 0) == 0)
      std::filesystem::remove(entry.path());
  return 0;
}

int main(int argc, char** argv) {
  // An error (a contender that cannot start, say) ends the run through main's return:
  // the servers this process started are stopped and their directories removed.
  try {
    return run_bench(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_pipeline: %s\n", e.what());
    return 1;
  }
}
