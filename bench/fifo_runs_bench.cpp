// FIFO through the container and the writers into PostgreSQL, from an in-process source
// that returns up to 10 messages of a group per receive, as SQS does (the emulator
// returns one per group, so on it a group advances a message per write whatever the
// consumer does). Three contenders on the same messages, alternated, each timed the
// same way: a standard queue (the same bodies without group ids: the ceiling FIFO is
// measured against), FIFO with group runs (ContainerOptions::ordered_group_runs, what
// `sluice run` does), and FIFO one message per group at a time (the library's default
// for a handler that does not keep the order itself). Rate, this process's CPU per
// message, PostgreSQL's CPU per record (its process tree, from /proc).
//   bench_fifo_runs [--messages N] [--groups 20,100] [--repeat 3] [--writers 4]
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "observe.hpp"
#include "sinks/postgres/postgres_sink.hpp"
#include "sluice/driver/sink.hpp"
#include "support/emulator.hpp"
#include "support/local_sqs.hpp"
#include "support/ordered_drain.hpp"

using namespace sluice;

namespace {

struct Figure {
  double rate = 0, cpu_us = 0, pg_cpu_us = 0;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

Figure run_one(test::Postgres& pg, const test::OrderedDrainOptions& options,
               const std::string& name) {
  static int tables = 0;
  sinks::PostgresOptions postgres;
  postgres.dsn = pg.dsn();
  postgres.table = "fifo_bench_" + std::to_string(getpid()) + "_" + std::to_string(++tables);
  const double cpu0 = test::cpu_seconds(), pg0 = bench::cpu_of_tree(pg.pid());
  const auto drain =
      test::drain_ordered([&] { return sinks::make_postgres_sink(postgres); }, options);
  const double cpu = test::cpu_seconds() - cpu0, pg_cpu = bench::cpu_of_tree(pg.pid()) - pg0;
  const double messages = static_cast<double>(options.groups) * options.per_group;
  const long rows = bench::table_rows(pg.dsn(), postgres.table);
  pg.query("DROP TABLE " + postgres.table);
  if (!drain.drained || rows != static_cast<long>(messages)) {
    std::fprintf(stderr, "%s: not drained (%ld rows of %.0f)\n", name.c_str(), rows, messages);
    std::exit(1);
  }
  Figure f{messages / drain.took.count(), cpu / messages * 1e6, pg_cpu / messages * 1e6};
  std::printf(
      "%-10s groups=%-3d messages=%.0f took=%.3fs rate=%.0f/s cpu=%.1fus/msg "
      "pg_cpu=%.1fus/record longest_run=%d\n",
      name.c_str(), options.groups, messages, drain.took.count(), f.rate, f.cpu_us, f.pg_cpu_us,
      drain.longest_run);
  std::fflush(stdout);
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  int messages = 30000, repeat = 3, writers = 4;
  std::vector<int> group_counts{20, 100};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--messages") {
      messages = std::stoi(value);
    } else if (flag == "--repeat") {
      repeat = std::stoi(value);
    } else if (flag == "--writers") {
      writers = std::stoi(value);
    } else if (flag == "--groups") {
      group_counts.clear();
      std::stringstream list(value);
      for (std::string item; std::getline(list, item, ',');)
        group_counts.push_back(std::stoi(item));
    } else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  spdlog::set_level(spdlog::level::warn);
  auto& pg = test::Postgres::shared();
  std::printf(
      "# bench_fifo_runs --messages %d --repeat %d --writers %d, PostgreSQL 15, "
      "batch_size 100\n",
      messages, repeat, writers);
  for (const int groups : group_counts) {
    std::map<std::string, std::vector<Figure>> figures;
    for (int r = 0; r < repeat; ++r)
      for (const std::string name : {"standard", "fifo-runs", "fifo-one"}) {
        test::OrderedDrainOptions options;
        options.groups = groups;
        options.per_group = messages / groups / 10 * 10;
        options.grouped = name != "standard";
        options.runs = name == "fifo-runs";
        options.writers = writers;
        options.batch_size = 100;
        options.max_attempts = 5;
        options.timeout = std::chrono::seconds(600);
        figures[name].push_back(run_one(pg, options, name));
      }
    auto med = [&](const std::string& name, double Figure::*field) {
      std::vector<double> v;
      for (const auto& f : figures[name]) v.push_back(f.*field);
      return median(v);
    };
    const double standard = med("standard", &Figure::rate);
    std::printf("## %d groups, medians of %d: rate msg/s, CPU us/msg, PostgreSQL CPU us/record\n",
                groups, repeat);
    for (const std::string name : {"standard", "fifo-runs", "fifo-one"})
      std::printf("%-10s rate=%.0f (%.2f of standard) cpu=%.1f (%.2fx standard) pg_cpu=%.1f\n",
                  name.c_str(), med(name, &Figure::rate), med(name, &Figure::rate) / standard,
                  med(name, &Figure::cpu_us),
                  med(name, &Figure::cpu_us) / med("standard", &Figure::cpu_us),
                  med(name, &Figure::pg_cpu_us));
  }
  return 0;
}
