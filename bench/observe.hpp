#pragma once
// Timing a consumer from outside, the same way for every contender (bench_pipeline,
// bench_amqp): spawn it as its own process, poll the queue and the table every 20 ms,
// stop the clock when the queue holds nothing and the table holds every distinct
// record (optionally only once the child has exited too).
// CPU and peak RSS are the contender's own (its process group's); the queue server's and
// the database's CPU during the run are read from /proc as well.
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
  double cpu_seconds = 0;  // the contender's user + system time, spawn to the clock's stop
  double rss_mib = 0;      // the largest peak resident set (VmHWM) in the contender's group
  double server_cpu = 0;   // the queue server's CPU seconds during the run
  double database_cpu = 0;
  long rows = -1;       // rows in the table at the end (-1: no table)
  int exit_status = 0;  // the contender's wait status (see exit_problem)
};

// One /proc/<pid>/stat: (name, parent, process group, CPU ticks of its own and of the
// children it has reaped: a PostgreSQL backend that ended is in the postmaster's).
struct ProcStat {
  std::string name;
  pid_t parent = 0, group = 0;
  unsigned long ticks = 0, own_ticks = 0;
};
inline bool read_stat(const std::string& pid, ProcStat& out) {
  std::ifstream stat("/proc/" + pid + "/stat");
  std::string text;
  if (!std::getline(stat, text)) return false;
  const auto open = text.find('('), close = text.rfind(')');
  if (open == std::string::npos || close == std::string::npos) return false;
  out.name = text.substr(open + 1, close - open - 1);
  std::istringstream fields(text.substr(close + 2));
  std::string field;
  out.ticks = out.own_ticks = 0;
  for (int i = 3; i <= 17 && fields >> field; ++i) {
    if (i == 4) out.parent = std::stoi(field);
    if (i == 5) out.group = std::stoi(field);
    if (i >= 14) out.ticks += std::stoul(field);
    if (i == 14 || i == 15) out.own_ticks += std::stoul(field);
  }
  return true;
}

// CPU seconds so far of every process that `match` accepts.
template <class Match>
double cpu_where(Match match, bool with_reaped_children = true) {
  double ticks = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    ProcStat stat;
    if (read_stat(name, stat) && match(std::stoi(name), stat))
      ticks += static_cast<double>(with_reaped_children ? stat.ticks : stat.own_ticks);
  }
  return ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// Every process whose name starts with `prefix` (beam.smp: RabbitMQ).
inline double cpu_of(const std::string& prefix) {
  return cpu_where([&](pid_t, const ProcStat& s) { return s.name.rfind(prefix, 0) == 0; });
}
// A server and its direct children (a postmaster and its backends): not another
// cluster's processes on the same machine.
inline double cpu_of_tree(pid_t root) {
  return cpu_where([&](pid_t pid, const ProcStat& s) { return pid == root || s.parent == root; });
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
  pid_t database_pid = -1;            // the postmaster: its backends' CPU is the database's
  std::string dsn, table;             // empty table: the contender writes nothing
  long expected_rows = 0;
  // Done only once the child has exited too (a queue that forgets acked messages only
  // after the ack, where an empty queue does not mean that every message is settled).
  bool until_exit = false;
};

// Spawns argv in a process group of its own, watches the queue and the table, returns
// when done (see the top). CPU and peak RSS are the group's (a profiler in front of
// the contender counts too) up to the moment the clock stops: a contender's shutdown is
// not timed. The group then gets SIGTERM (SIGKILL after 15 s) and is waited for; on any
// error the group is killed before the error leaves.
inline Observed observe(const std::vector<std::string>& argv, const Watch& watch) {
  const std::string log = "/tmp/sluice-bench-" + std::to_string(getpid()) + ".log";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attributes, 0);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  auto server_cpu = [&] {
    if (watch.server_pid > 0) return cpu_of_tree(watch.server_pid);
    return cpu_of(watch.server_process);
  };
  auto database_cpu = [&] {
    return watch.database_pid > 0 ? cpu_of_tree(watch.database_pid) : cpu_of("postgres");
  };
  const double server_before = server_cpu(), database_before = database_cpu();
  pid_t pid = 0;
  const auto started = std::chrono::steady_clock::now();
  const int spawned = posix_spawn(&pid, args[0], &actions, &attributes, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  if (spawned != 0) throw std::runtime_error("cannot start " + argv[0]);
  Observed result;
  bool reaped = false;
  // Stops the whole group, whatever path leaves this function.
  struct Group {
    pid_t leader;
    bool& reaped;
    int& status;
    void stop(int signal, std::chrono::seconds grace) {
      kill(-leader, signal);
      const auto until = std::chrono::steady_clock::now() + grace;
      while (!reaped && std::chrono::steady_clock::now() < until) {
        if (waitpid(leader, &status, WNOHANG) == leader)
          reaped = true;
        else
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      // Members left behind by a leader that ended (a profiler's child): gone too.
      while (kill(-leader, 0) == 0 && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ~Group() {
      if (kill(-leader, 0) == 0 || !reaped) stop(SIGKILL, std::chrono::seconds(5));
    }
  } group{pid, reaped, result.exit_status};
  auto in_group = [&](pid_t, const ProcStat& s) { return s.group == pid; };
  long peak_kib = 0;
  double cpu_ticks_seen = 0;  // the group's CPU at the last sample (a member may end)
  auto sample = [&] {
    for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
      const std::string name = entry.path().filename();
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      ProcStat stat;
      if (!read_stat(name, stat) || stat.group != pid) continue;
      std::ifstream status_file("/proc/" + name + "/status");
      std::string line;
      while (std::getline(status_file, line))
        if (line.rfind("VmHWM:", 0) == 0)
          peak_kib = std::max(peak_kib, std::atol(line.c_str() + 6));
    }
    cpu_ticks_seen = std::max(cpu_ticks_seen, cpu_where(in_group, false));
  };
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (!reaped) sample();
    rusage usage{};
    if (!reaped && wait4(pid, &result.exit_status, WNOHANG, &usage) == pid) {
      reaped = true;
      cpu_ticks_seen =
          std::max(cpu_ticks_seen,
                   static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                       static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6);
    }
    const long depth = watch.queue_depth();
    if (std::getenv("BENCH_TRACE"))
      std::fprintf(
          stderr, "trace %.3f s depth %ld\n",
          std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(), depth);
    if (depth == 0) {
      const bool settled = !watch.until_exit || reaped;
      if (settled &&
          (watch.table.empty() || table_rows(watch.dsn, watch.table) >= watch.expected_rows))
        break;
    } else if (reaped) {
      throw std::runtime_error(argv[0] + " exited before the queue was empty; see " + log);
    }
    if (std::chrono::steady_clock::now() - started > std::chrono::minutes(10))
      throw std::runtime_error(argv[0] + " took over 10 minutes; see " + log);
  }
  result.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (!reaped) sample();
  result.cpu_seconds = cpu_ticks_seen;
  result.server_cpu = server_cpu() - server_before;
  result.database_cpu = database_cpu() - database_before;
  result.rss_mib = static_cast<double>(peak_kib) / 1024.0;
  group.stop(SIGTERM, std::chrono::seconds(15));
  if (!watch.table.empty()) result.rows = table_rows(watch.dsn, watch.table);
  if (const char* keep = std::getenv("BENCH_KEEP_LOGS"); keep && *keep)
    std::filesystem::copy_file(log,
                               std::string(keep) + "/" +
                                   std::filesystem::path(argv[0]).filename().string() + "-" +
                                   std::to_string(pid) + ".log",
                               std::filesystem::copy_options::overwrite_existing);
  std::remove(log.c_str());
  return result;
}

// "" when the contender ended cleanly (exit 0 after our SIGTERM), else what happened.
inline std::string exit_problem(int status) {
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return "";
  if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
  return "status " + std::to_string(status);
}

}  // namespace sluice::bench
