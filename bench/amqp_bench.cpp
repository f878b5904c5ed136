// RabbitMQ into PostgreSQL, every contender timed the same way from outside: each is
// spawned as its own process on a queue holding the same COUNT inventory events, and
// an observer polls the queue (passive queue.declare, every 20 ms) and the table;
// the clock stops when the queue has no ready message and the table holds every
// distinct record (the ceiling, which writes nothing: when it exits after acking
// them all). CPU and peak RSS are the child's own (wait4), broker and database not
// included. One broker, one PostgreSQL 15 (fsync off), same run:
//   1. no-work ceiling: bench_amqp_raw, bare rabbitmq-c, prefetch 250, acks
//      multiple=true, writes nothing;
//   2. database ceiling: bench_amqp_raw writing the very rows the pipeline writes
//      (worked out here with Sluice's transform), with the sink's statement and group
//      commit (bench/pg_rows.hpp), prefetch 1000, each acked once written;
//   3. sluice run --until-drained (examples of config below), into PostgreSQL;
//   4. Node amqplib + pg doing the same work (bench/node-peer/amqp-consumer.mjs).
// Each row's ratios are against both ceilings of its run.
// Usage: bench_amqp [COUNT] [RUNS] [--no-node]
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "amqp/connection.hpp"
#include "cli/publish.hpp"
#include "observe.hpp"
#include "rows_file.hpp"
#include "sluice/amqp/publisher.hpp"
#include "support/emulator.hpp"
#include "support/rabbitmq.hpp"

using namespace sluice;

namespace {

void fill(const std::string& queue, const std::vector<std::string>& bodies) {
  amqp::ConnectionOptions o;
  o.uri = amqp::parse_uri(test::RabbitMq::shared().uri());
  amqp::Connection admin(o);
  admin.open_channel(1);
  admin.declare_queue(1, queue);
  amqp::PublisherOptions p;
  p.uri = test::RabbitMq::shared().uri();
  amqp::Publisher publisher(p);
  std::vector<amqp::OutgoingMessage> messages;
  for (const auto& b : bodies) {
    amqp::OutgoingMessage m;
    m.routing_key = queue;
    m.body = b;
    messages.push_back(std::move(m));
  }
  if (!publisher.publish("", std::move(messages)).ok()) throw std::runtime_error("fill failed");
}

// Spawns argv and times it from outside (bench/observe.hpp) on `queue`.
bench::Observed observe(const std::vector<std::string>& argv, const std::string& queue,
                        const std::string& dsn, const std::string& table, long distinct) {
  amqp::ConnectionOptions o;
  o.uri = amqp::parse_uri(test::RabbitMq::shared().uri());
  amqp::Connection watcher(o);
  watcher.open_channel(1);
  bench::Watch watch;
  watch.queue_depth = [&] { return static_cast<long>(watcher.inspect_queue(1, queue).messages); };
  watch.server_process = "beam.smp";
  watch.database_pid = test::Postgres::shared().pid();
  watch.dsn = dsn;
  watch.table = table;
  watch.expected_rows = distinct;
  // A ready count of 0 still leaves unacked deliveries: the ceiling is done when it exits.
  watch.until_exit = table.empty();
  return bench::observe(argv, watch);
}

std::string sluice_config(const std::string& queue, const std::string& dsn,
                          const std::string& table) {
  auto env = [](const char* name, const char* fallback) {
    const char* v = std::getenv(name);
    return std::string(v ? v : fallback);
  };
  return "source:\n  type: rabbitmq\n  rabbitmq:\n    url: " + test::RabbitMq::shared().uri() +
         "\n    queue: " + queue +
         "\n    prefetch: 250\n  concurrency: " + env("BENCH_CONSUMERS", "4") +
         "\n  max_in_flight: " + env("BENCH_INFLIGHT", "4000") +
         "\n  worker_threads: 2\nnormalize:\n  fields:\n"
         "    - {name: skuId, from: /skuId, required: true}\n"
         "    - {name: locationId, from: /locationId, required: true}\n"
         "    - {name: eventType, from: /eventType, required: true}\n"
         "    - {name: quantity, from: /quantity, type: integer, required: true}\n"
         "    - {name: eventId, from: /eventId}\n"
         "identity:\n  version: V1\n  versions:\n    V1: [skuId, locationId, eventType, quantity]\n"
         "sink:\n  type: postgres\n  table: " +
         table + "\n  batch_size: " + env("BENCH_BATCH", "100") +
         "\n  writers: " + env("BENCH_WRITERS", "4") + "\n  postgres:\n    dsn: " + dsn +
         "\nmetrics:\n  listen: ''\nlogging:\n  level: error\n";
}

}  // namespace

int main(int argc, char** argv) {
  const int count = argc > 1 ? std::atoi(argv[1]) : 100000;
  const int runs = argc > 2 ? std::atoi(argv[2]) : 1;
  const bool node = !(argc > 3 && std::strcmp(argv[3], "--no-node") == 0);
  auto& broker = test::RabbitMq::shared();
  auto& pg = test::Postgres::shared();
  const auto events = app::generate_events(count, 0.2, 0.0, 11);
  const long distinct = static_cast<long>(events.distinct_records);
  const std::string dir = SLUICE_BINARY_DIR;
  const std::string node_bin =
      std::string(SLUICE_SOURCE_DIR) + "/tools/emulator/node_modules/.bin/node";
  std::printf(
      "RabbitMQ benchmark: %d inventory events (%ld distinct), RabbitMQ 3.10 + PostgreSQL 15 "
      "(fsync off) on loopback, timed from outside\n",
      count, distinct);
  // The database ceiling's rows: each body's record, by Sluice's own transform.
  const std::string rows_file = "/tmp/sluice-bench-amqp-rows-" + std::to_string(getpid()) + ".tsv";
  const bench::RemoveOnExit remove_rows{rows_file};
  bench::write_rows_file(sluice_config("q", pg.dsn(), "t"), events.bodies, rows_file);
  std::printf("%-4s %-46s %8s %8s %11s %8s %8s %8s %11s\n", "run", "contender", "seconds", "msg/s",
              "CPU us/msg", "RSS MiB", "no-work", "database", "broker/db s");
  for (int run = 1; run <= runs; ++run) {
    double ceiling_rate = 0, database_rate = 0;
    auto report = [&](const char* name, const bench::Observed& r) {
      const double rate = count / r.seconds;
      if (ceiling_rate == 0)
        ceiling_rate = rate;
      else if (database_rate == 0)
        database_rate = rate;
      char of_database[16] = "-";  // the no-work ceiling comes before the database one
      if (database_rate > 0)
        std::snprintf(of_database, sizeof of_database, "%.2f", rate / database_rate);
      std::printf("%-4d %-46s %8.2f %8.0f %11.1f %8.1f %8.2f %8s %5.1f/%-5.1f%s\n", run, name,
                  r.seconds, rate, r.cpu_seconds / count * 1e6, r.rss_mib, rate / ceiling_rate,
                  of_database, r.server_cpu, r.database_cpu,
                  !bench::exit_problem(r.exit_status).empty()
                      ? ("  ENDED BADLY: " + bench::exit_problem(r.exit_status)).c_str()
                  : r.rows >= 0 && r.rows != distinct ? "  ROWS WRONG"
                                                      : "");
      std::fflush(stdout);
    };
    const std::string tag = std::to_string(getpid()) + "_" + std::to_string(run);
    {
      const std::string q = "bench-raw-" + tag;
      fill(q, events.bodies);
      report("ceiling: bare rabbitmq-c, no work",
             observe({dir + "/bench_amqp_raw", "127.0.0.1", std::to_string(broker.port()), q,
                      std::to_string(count)},
                     q, pg.dsn(), "", distinct));
    }
    {
      const std::string q = "bench-rawdb-" + tag, table = "bench_rawdb_" + tag;
      fill(q, events.bodies);
      report("database ceiling: bare rabbitmq-c + libpq",
             observe({dir + "/bench_amqp_raw", "127.0.0.1", std::to_string(broker.port()), q,
                      std::to_string(count), pg.dsn(), table, rows_file},
                     q, pg.dsn(), table, distinct));
    }
    {
      const std::string q = "bench-sluice-" + tag, table = "bench_sluice_" + tag;
      fill(q, events.bodies);
      const std::string config = "/tmp/bench-amqp-" + tag + ".yaml";
      std::ofstream(config) << sluice_config(q, pg.dsn(), table);
      report("sluice run -> PostgreSQL (4 consumers, 4 writers)",
             observe({std::string(SLUICE_BINARY), "run", "--until-drained", "--config", config}, q,
                     pg.dsn(), table, distinct));
      std::remove(config.c_str());
    }
    if (node) {
      const std::string q = "bench-node-" + tag, table = "bench_node_" + tag;
      fill(q, events.bodies);
      report("Node amqplib + pg (batch 100, pool 4)",
             observe({node_bin, "--no-warnings",
                      std::string(SLUICE_SOURCE_DIR) + "/bench/node-peer/amqp-consumer.mjs",
                      broker.uri(), q, pg.dsn(), table},
                     q, pg.dsn(), table, distinct));
    }
  }
  return 0;
}
