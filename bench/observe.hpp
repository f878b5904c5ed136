#pragma once
// Timing a consumer from outside, the same way for every contender (bench_pipeline,
// bench_amqp): spawn it as its own process, poll the queue and the table every 20 ms,
// stop the clock when the queue holds nothing and the table holds every distinct
// record (optionally only once the child has exited too).
// CPU and peak RSS are the child's own; the queue server's and the database's CPU
// during the run are read from /proc as well.
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
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace sluice::bench {

struct Observed {
  double seconds = 0;      // spawn until the queue is empty and the table complete
  double cpu_seconds = 0;  // the child's user + system time (wait4), start to exit
  double rss_mib = 0;      // the child's peak resident set (VmHWM)
  double server_cpu = 0;   // the queue server's CPU seconds during the run
  double database_cpu = 0;
  long rows = -1;       // rows in the table at the end (-1: no table)
  int exit_status = 0;  // the child's wait status
};

// CPU seconds used so far by every process whose name starts with `prefix`, with the
// children it has reaped
// (node: the SQS emulator; beam.smp: RabbitMQ; postgres: the server and its backends).
inline double cpu_of(const std::string& prefix, pid_t except = -1) {
  double total = 0;
  const long ticks = sysconf(_SC_CLK_TCK);
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    if (except > 0 && std::to_string(except) == name) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string text;
    std::getline(stat, text);
    const auto open = text.find('('), close = text.rfind(')');
    if (open == std::string::npos || close == std::string::npos) continue;
    if (text.compare(open + 1, prefix.size(), prefix) != 0) continue;
    // Its own time and its reaped children's (a PostgreSQL backend that ended is
    // counted in the postmaster's cutime/cstime).
    std::istringstream fields(text.substr(close + 2));
    std::string field;
    unsigned long ticks_used = 0;
    for (int i = 3; i <= 17 && fields >> field; ++i)
      if (i >= 14) ticks_used += std::stoul(field);
    total += static_cast<double>(ticks_used) / static_cast<double>(ticks);
  }
  return total;
}

// Rows in a PostgreSQL table; -1 while it does not exist yet.
inline long table_rows(const std::string& dsn, const std::string& table) {
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

struct Watch {
  std::function<long()> queue_depth;  // messages still in the queue (visible or not)
  std::string server_process;         // name prefix of the queue server's processes
  pid_t server_pid = -1;              // ... or its one process (the emulator is a node too)
  std::string dsn, table;             // empty table: the contender writes nothing
  long expected_rows = 0;
  // Done only once the child has exited too (a queue that forgets acked messages only
  // after the ack, where an empty queue does not mean that every message is settled).
  bool until_exit = false;
};

// Spawns argv, watches the queue and the table, returns when done (see the top).
// The child gets SIGTERM then and is waited for; its exit status is reported.
inline Observed observe(const std::vector<std::string>& argv, const Watch& watch) {
  const std::string log = "/tmp/sluice-bench-" + std::to_string(getpid()) + ".log";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  auto server_cpu = [&] {
    if (watch.server_pid <= 0) return cpu_of(watch.server_process);
    std::ifstream stat("/proc/" + std::to_string(watch.server_pid) + "/stat");
    std::string text;
    std::getline(stat, text);
    std::istringstream fields(text.substr(text.rfind(')') + 2));
    std::string field;
    unsigned long utime = 0, stime = 0;
    for (int i = 3; i <= 15 && fields >> field; ++i) {
      if (i == 14) utime = std::stoul(field);
      if (i == 15) stime = std::stoul(field);
    }
    return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
  };
  const double server_before = server_cpu(), database_before = cpu_of("postgres");
  pid_t pid = 0;
  const auto started = std::chrono::steady_clock::now();
  if (posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ) != 0)
    throw std::runtime_error("cannot start " + argv[0]);
  posix_spawn_file_actions_destroy(&actions);
  Observed result;
  rusage usage{};
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
    if (wait4(pid, &result.exit_status, WNOHANG, &usage) == pid) exited = true;
    const long depth = watch.queue_depth();
    if (std::getenv("BENCH_TRACE"))
      std::fprintf(
          stderr, "trace %.3f s depth %ld\n",
          std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(), depth);
    if (depth == 0) {
      const bool settled = !watch.until_exit || exited;
      if (settled &&
          (watch.table.empty() || table_rows(watch.dsn, watch.table) >= watch.expected_rows))
        break;
    } else if (exited) {
      throw std::runtime_error(argv[0] + " exited before the queue was empty; see " + log);
    }
    if (std::chrono::steady_clock::now() - started > std::chrono::minutes(10))
      throw std::runtime_error(argv[0] + " took over 10 minutes; see " + log);
  }
  result.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  result.server_cpu = server_cpu() - server_before;
  result.database_cpu = cpu_of("postgres") - database_before;
  if (!exited) {
    sample_rss();
    kill(pid, SIGTERM);
    wait4(pid, &result.exit_status, 0, &usage);
  }
  result.cpu_seconds = static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                       static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
  result.rss_mib = static_cast<double>(peak_kib) / 1024.0;
  if (!watch.table.empty()) result.rows = table_rows(watch.dsn, watch.table);
  if (const char* keep = std::getenv("BENCH_KEEP_LOGS"); keep && *keep)
    std::filesystem::rename(log, std::string(keep) + "/" +
                                     std::filesystem::path(argv[0]).filename().string() + "-" +
                                     std::to_string(pid) + ".log");
  else
    std::remove(log.c_str());
  return result;
}

}  // namespace sluice::bench
