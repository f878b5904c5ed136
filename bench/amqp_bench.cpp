// RabbitMQ into PostgreSQL, every contender timed the same way from outside: each is
// spawned as its own process on a queue holding the same COUNT inventory events, and
// an observer polls the queue (passive queue.declare, every 20 ms) and the table;
// the clock stops when the queue has no ready message and the table holds every
// distinct record (the ceiling, which writes nothing: when it exits after acking
// them all). CPU and peak RSS are the child's own (wait4), broker and database not
// included. One broker, one PostgreSQL 15 (fsync off), same run:
//   1. ceiling: bench_amqp_raw, bare rabbitmq-c, prefetch 250, acks multiple=true;
//   2. sluice run --until-drained (examples of config below), into PostgreSQL;
//   3. Node amqplib + pg doing the same work (bench/node-peer/amqp-consumer.mjs).
// Usage: bench_amqp [COUNT] [RUNS] [--no-node]
#include <fcntl.h>
#include <libpq-fe.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "amqp/connection.hpp"
#include "app/publish.hpp"
#include "sluice/amqp/publisher.hpp"
#include "support/emulator.hpp"
#include "support/rabbitmq.hpp"

extern char** environ;
using namespace sluice;
using Clock = std::chrono::steady_clock;

namespace {

struct Result {
  double seconds = 0, cpu_us_per_msg = 0, rss_mib = 0;
  double broker_cpu = 0, database_cpu = 0;  // seconds, during the run
  long rows = -1;
};

// CPU seconds used so far by every live process whose name starts with `prefix`
// (beam.smp: the broker; postgres: the server and its backends).
double cpu_of(const std::string& prefix) {
  double total = 0;
  const long ticks = sysconf(_SC_CLK_TCK);
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string text;
    std::getline(stat, text);
    const auto open = text.find('('), close = text.rfind(')');
    if (open == std::string::npos || close == std::string::npos) continue;
    if (text.compare(open + 1, prefix.size(), prefix) != 0) continue;
    std::istringstream fields(text.substr(close + 2));
    std::string field;
    unsigned long utime = 0, stime = 0;
    for (int i = 3; i <= 15 && fields >> field; ++i) {
      if (i == 14) utime = std::stoul(field);
      if (i == 15) stime = std::stoul(field);
    }
    total += static_cast<double>(utime + stime) / static_cast<double>(ticks);
  }
  return total;
}

long table_rows(const std::string& dsn, const std::string& table) {
  PGconn* conn = PQconnectdb(dsn.c_str());
  long rows = -1;
  if (PQstatus(conn) == CONNECTION_OK) {
    PGresult* r = PQexec(conn, ("SELECT count(*) FROM \"" + table + "\"").c_str());
    if (PQresultStatus(r) == PGRES_TUPLES_OK) rows = std::atol(PQgetvalue(r, 0, 0));
    PQclear(r);
  }
  PQfinish(conn);
  return rows;
}

void fill(const std::string& queue, const std::vector<std::string>& bodies) {
  amqp::ConnectionOptions o;
  o.uri = amqp::parse_uri(test::RabbitMq::shared().uri());
  amqp::Connection admin(o);
  admin.open_channel(1);
  admin.declare_queue(1, queue, false, "");
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

// Spawns argv, watches the queue and the table, returns when done (see the top).
Result observe(const std::vector<std::string>& argv, const std::string& queue,
               const std::string& dsn, const std::string& table, long distinct) {
  amqp::ConnectionOptions o;
  o.uri = amqp::parse_uri(test::RabbitMq::shared().uri());
  amqp::Connection watch(o);
  watch.open_channel(1);
  const std::string log = "/tmp/bench-amqp-" + std::to_string(getpid()) + ".log";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_addopen(&actions, 2, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const double broker_before = cpu_of("beam.smp"), database_before = cpu_of("postgres");
  const auto started = Clock::now();
  if (posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ) != 0)
    throw std::runtime_error("cannot start " + argv[0]);
  posix_spawn_file_actions_destroy(&actions);
  Result result;
  rusage usage{};
  int status = 0;
  bool exited = false;
  // Peak RSS from /proc (VmHWM): wait4's ru_maxrss would count the harness too, since
  // posix_spawn's child shares our memory until it execs.
  long peak_kib = 0;
  auto sample_rss = [&] {
    std::ifstream status_file("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    while (std::getline(status_file, line))
      if (line.rfind("VmHWM:", 0) == 0) peak_kib = std::max(peak_kib, std::atol(line.c_str() + 6));
  };
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (!exited) sample_rss();
    if (wait4(pid, &status, WNOHANG, &usage) == pid) exited = true;
    const auto ready = watch.inspect_queue(1, queue).messages;
    if (ready == 0) {
      if (table.empty() ? exited : table_rows(dsn, table) >= distinct) break;
    }
    if (exited && ready != 0) throw std::runtime_error(argv[0] + " exited early; see " + log);
    if (Clock::now() - started > std::chrono::minutes(10)) throw std::runtime_error("too slow");
  }
  result.seconds = std::chrono::duration<double>(Clock::now() - started).count();
  result.broker_cpu = cpu_of("beam.smp") - broker_before;
  result.database_cpu = cpu_of("postgres") - database_before;
  if (!exited) {
    sample_rss();
    kill(pid, SIGTERM);
    wait4(pid, &status, 0, &usage);
  }
  const double cpu = static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                     static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
  result.cpu_us_per_msg = cpu;  // divided by the count by the caller
  result.rss_mib = static_cast<double>(peak_kib) / 1024.0;
  if (!table.empty()) result.rows = table_rows(dsn, table);
  std::remove(log.c_str());
  return result;
}

std::string sluice_config(const std::string& queue, const std::string& dsn,
                          const std::string& table) {
  auto env = [](const char* name, const char* fallback) {
    const char* v = std::getenv(name);
    return std::string(v ? v : fallback);
  };
  return "source:\n  type: rabbitmq\n  amqp_url: " + test::RabbitMq::shared().uri() +
         "\n  queue: " + queue + "\n  concurrency: " + env("BENCH_CONSUMERS", "4") +
         "\n  prefetch: 250\n  max_in_flight: " + env("BENCH_INFLIGHT", "4000") +
         "\n  worker_threads: 2\nnormalize:\n  fields:\n"
         "    - {name: skuId, from: /skuId, required: true}\n"
         "    - {name: locationId, from: /locationId, required: true}\n"
         "    - {name: eventType, from: /eventType, required: true}\n"
         "    - {name: quantity, from: /quantity, type: integer, required: true}\n"
         "    - {name: eventId, from: /eventId}\n"
         "identity:\n  version: V1\n  versions:\n    V1: [skuId, locationId, eventType, quantity]\n"
         "sink:\n  type: postgres\n  table: " +
         table + "\n  batch_size: 200\n  writers: " + env("BENCH_WRITERS", "4") +
         "\n  postgres:\n    dsn: " + dsn + "\nmetrics:\n  listen: ''\nlogging:\n  level: error\n";
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
  std::printf("%-4s %-46s %8s %8s %11s %8s %8s %11s\n", "run", "contender", "seconds", "msg/s",
              "CPU us/msg", "RSS MiB", "ceiling", "broker/db s");
  for (int run = 1; run <= runs; ++run) {
    double ceiling_rate = 0;
    auto report = [&](const char* name, const Result& r) {
      const double rate = count / r.seconds;
      if (ceiling_rate == 0) ceiling_rate = rate;
      std::printf("%-4d %-46s %8.2f %8.0f %11.1f %8.1f %8.2f %5.1f/%-5.1f%s\n", run, name,
                  r.seconds, rate, r.cpu_us_per_msg / count * 1e6, r.rss_mib, rate / ceiling_rate,
                  r.broker_cpu, r.database_cpu,
                  r.rows >= 0 && r.rows != distinct ? "  ROWS WRONG" : "");
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
