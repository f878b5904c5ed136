// Several pipelines in one process do not hold each other up: with one pipeline's
// PostgreSQL frozen (the fault proxy: connections open, nothing forwarded), the other
// drains its whole backlog to exactly its distinct records; once the database answers
// again the frozen one drains too, exactly. The fault is proven (chunks held back by
// the proxy, the frozen pipeline's rows short of its events while the other finished).
// The drain time of the healthy pipeline, alone and beside the frozen one, is printed
// as a figure, not asserted (these machines are noisy).
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <atomic>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "app/run.hpp"
#include "config/config.hpp"
#include "observe/http_get.hpp"
#include "support/fault_proxy.hpp"
#include "support/pipeline.hpp"
#include "support/process.hpp"
#include "support/wait.hpp"

using namespace sluice;
using Clock = std::chrono::steady_clock;

namespace {

long sqlite_count(const std::string& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    sqlite3_close(db);
    return -1;
  }
  sqlite3_busy_timeout(db, 1000);
  sqlite3_stmt* st = nullptr;
  long n = -1;
  if (sqlite3_prepare_v2(db, "SELECT count(*) FROM records", -1, &st, nullptr) == SQLITE_OK &&
      sqlite3_step(st) == SQLITE_ROW)
    n = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  sqlite3_close(db);
  return n;
}

// The distinct business records of several generated streams together (two seeds may
// draw the same record).
long distinct_of(const std::vector<const app::GeneratedEvents*>& streams) {
  std::set<std::string> records;
  for (const auto* events : streams)
    for (const auto& body : events->bodies) {
      const auto e = nlohmann::json::parse(body, nullptr, false);
      if (!e.is_object() || !e.contains("skuId")) continue;
      const auto& q = e["quantity"];
      records.insert(e["skuId"].get<std::string>() + "|" + e["locationId"].get<std::string>() +
                     "|" + e["eventType"].get<std::string>() + "|" +
                     (q.is_string() ? q.get<std::string>() : std::to_string(q.get<long>())));
    }
  return static_cast<long>(records.size());
}

class OperationsIsolation : public test::PipelineFixture {};

}  // namespace

TEST_F(OperationsIsolation, AFrozenDatabaseHoldsUpOnlyItsOwnPipeline) {
  auto& pg = test::Postgres::shared();
  test::TcpFaultProxy proxy("127.0.0.1", pg.port());
  const std::string healthy = make_queue("iso-healthy"), frozen = make_queue("iso-frozen");
  const std::string db = ::testing::TempDir() + "/sluice-iso-" + std::to_string(getpid()) + ".db";
  test::remove_sqlite(db);
  const std::string table = "iso_" + std::to_string(getpid());
  const std::string sqs = "        endpoint_url: " + test::Emulator::shared().endpoint() +
                          "\n        region: us-east-1\n        poll_wait: 1s\n";
  const std::string yaml =
      "metrics:\n  listen: 127.0.0.1:0\nlogging:\n  level: warn\n" +
      std::string(test::kInventoryNormalizeYaml) +
      "pipelines:\n"
      "  healthy:\n    source:\n      sqs:\n        queue_url: " +
      healthy + "\n" + sqs + "    sink:\n      type: sqlite\n      sqlite:\n        path: " + db +
      "\n"
      "  frozen:\n    source:\n      sqs:\n        queue_url: " +
      frozen + "\n" + sqs + "    sink:\n      type: postgres\n      table: " + table +
      "\n      postgres:\n        dsn: host=127.0.0.1 port=" + std::to_string(proxy.port()) +
      " user=postgres dbname=postgres\n        query_timeout: 60s\n";
  const auto configs = app::parse_pipelines(yaml);
  ASSERT_EQ(configs.size(), 2u);

  // The frozen pipeline's first events go through: its table and connections exist.
  const auto frozen_first = publish(frozen, 300, 0.0, 0.0, 41);
  app::RunOptions options;
  options.until_drained = true;
  // The run ends once both pipelines have been idle this long: longer than the gap
  // between the frozen pipeline's first rows and the healthy events' arrival, which a
  // sanitizer build stretches past a second or two.
  options.drained_for = std::chrono::milliseconds(5000);
  options.quiet = true;
  std::vector<app::RunSummary> summaries;
  int code = -1;
  std::thread run([&] { code = app::run_pipelines(configs, options, summaries); });
  // Whatever throws from here on (a query, a publish), the run is joined first and the
  // test fails with the exception's text: a joinable thread destroyed would abort the
  // whole process with no word of why.
  struct JoinAtExit {
    std::thread& run;
    test::TcpFaultProxy& proxy;
    ~JoinAtExit() {
      if (!run.joinable()) return;
      proxy.stall(false);  // the run drains and ends
      run.join();
    }
  } join_at_exit{run, proxy};
  // -1 until the pipeline has made its table (psql fails on a missing one).
  const auto pg_rows = [&] {
    std::string text;
    try {
      text = pg.query("SELECT count(*) FROM " + table);
    } catch (const std::exception&) {
      return -1L;
    }
    return text.empty() || text.find_first_not_of("0123456789\n") != std::string::npos
               ? -1L
               : std::stol(text);
  };
  // EXPECT, not ASSERT, from here to the join: the run's thread must be joined.
  test::wait_until([&] { return pg_rows() >= static_cast<long>(frozen_first.distinct_records); },
                   std::chrono::seconds(60));
  EXPECT_EQ(pg_rows(), static_cast<long>(frozen_first.distinct_records)) << "work had started";

  // Alone: the healthy pipeline drains 3,000 events while the other idles.
  auto started = Clock::now();
  const auto alone = publish(healthy, 3000, 0.2, 0.0, 42);
  test::wait_until([&] { return sqlite_count(db) >= static_cast<long>(alone.distinct_records); });
  const double alone_seconds = std::chrono::duration<double>(Clock::now() - started).count();
  EXPECT_EQ(sqlite_count(db), static_cast<long>(alone.distinct_records));

  // Frozen: the other pipeline's database stops answering, with events waiting for it.
  proxy.stall(true);
  const auto frozen_more = publish(frozen, 1000, 0.0, 0.0, 43);
  // Its writers are stuck: the proxy holds what they sent.
  EXPECT_TRUE(test::wait_until([&] { return proxy.stalled_chunks() > 0; }))
      << "the frozen pipeline's writers never reached the stalled database";
  started = Clock::now();
  const auto beside = publish(healthy, 3000, 0.2, 0.0, 44);
  const long expected = distinct_of({&alone, &beside});
  test::wait_until([&] { return sqlite_count(db) >= expected; });
  const double beside_seconds = std::chrono::duration<double>(Clock::now() - started).count();
  EXPECT_EQ(sqlite_count(db), expected) << "the healthy pipeline drained beside the frozen one";
  EXPECT_GT(proxy.stalled_chunks(), 0u) << "the fault happened";
  EXPECT_LT(pg_rows(), distinct_of({&frozen_first, &frozen_more}))
      << "the frozen pipeline had not written its backlog while the other drained";
  proxy.stall(false);
  std::printf(
      "[ figure ] healthy pipeline, 3,000 events: %.2f s alone, %.2f s beside a frozen "
      "database (%.0f%%)\n",
      alone_seconds, beside_seconds, 100.0 * beside_seconds / alone_seconds);

  // The database answers again: the frozen pipeline drains too, exactly.
  run.join();
  EXPECT_EQ(code, 0);
  EXPECT_EQ(pg_rows(), distinct_of({&frozen_first, &frozen_more}));
  EXPECT_EQ(sqlite_count(db), expected);
  EXPECT_EQ(queue_total(healthy), 0);
  EXPECT_EQ(queue_total(frozen), 0);
  test::remove_sqlite(db);
}

namespace {

// The value of a counter or gauge series in a Prometheus exposition, or -1.
double series_value(const std::string& exposition, const std::string& series) {
  const auto at = exposition.find(series + " ");
  return at == std::string::npos ? -1 : std::stod(exposition.substr(at + series.size() + 1));
}

}  // namespace

// Several pipelines start on their own: one whose PostgreSQL is frozen before the start
// (its connects get no answer) retries with backoff, not ready and saying why, while
// the other drains exactly; after the thaw the frozen one starts and drains exactly too.
// The fault is proven (failed attempts counted, nothing of its queue received while the
// other finished).
TEST_F(OperationsIsolation, ADatabaseFrozenBeforeTheStartHoldsBackOnlyItsOwnPipeline) {
  auto& pg = test::Postgres::shared();
  test::TcpFaultProxy proxy("127.0.0.1", pg.port());
  proxy.stall(true);
  const std::string healthy = make_queue("isostart-healthy"),
                    frozen = make_queue("isostart-frozen");
  const std::string db =
      ::testing::TempDir() + "/sluice-isostart-" + std::to_string(getpid()) + ".db";
  test::remove_sqlite(db);
  const std::string table = "isostart_" + std::to_string(getpid());
  const std::string endpoint = "127.0.0.1:" + std::to_string(test::free_port());
  const std::string sqs = "        endpoint_url: " + test::Emulator::shared().endpoint() +
                          "\n        region: us-east-1\n        poll_wait: 1s\n";
  const std::string yaml =
      "metrics:\n  listen: " + endpoint + "\nadmin:\n  enabled: true\nlogging:\n  level: warn\n" +
      std::string(test::kInventoryNormalizeYaml) +
      "pipelines:\n"
      "  healthy:\n    source:\n      sqs:\n        queue_url: " +
      healthy + "\n" + sqs + "    sink:\n      type: sqlite\n      sqlite:\n        path: " + db +
      "\n"
      "  frozen:\n    source:\n      sqs:\n        queue_url: " +
      frozen + "\n" + sqs + "    sink:\n      type: postgres\n      table: " + table +
      "\n      postgres:\n        dsn: host=127.0.0.1 port=" + std::to_string(proxy.port()) +
      " user=postgres dbname=postgres\n        connect_timeout: 1s\n";
  const auto configs = app::parse_pipelines(yaml);
  ASSERT_EQ(configs.size(), 2u);
  const auto healthy_events = publish(healthy, 2000, 0.2, 0.0, 51);
  const auto frozen_events = publish(frozen, 500, 0.2, 0.0, 52);

  // A service, not a batch: it runs until SIGTERM (--until-drained would end it with
  // exit 3 once the healthy one drained, UntilDrainedEndsWithCode3...).
  app::RunOptions options;
  options.quiet = true;
  std::vector<app::RunSummary> summaries;
  int code = -1;
  std::atomic<bool> running{true};
  std::thread run([&] {
    code = app::run_pipelines(configs, options, summaries);
    running = false;
  });
  // The run's own handler takes SIGTERM while it runs (a graceful stop, exit 0).
  const auto stop_run = [&] {
    if (running) raise(SIGTERM);
    run.join();
  };
  struct JoinAtExit {
    std::thread& run;
    test::TcpFaultProxy& proxy;
    std::function<void()> stop;
    ~JoinAtExit() {
      if (!run.joinable()) return;
      proxy.stall(false);
      stop();
    }
  } join_at_exit{run, proxy, stop_run};
  auto get = [&](const std::string& path) {
    const auto local_url = observe::parse_local_url("http://" + endpoint + path);
    try {
      return observe::http_request(local_url);
    } catch (const std::exception&) {
      return observe::LocalResponse{};  // not listening yet
    }
  };
  const std::string failures = R"(sluice_sink_open_failures_total{pipeline="frozen"})";

  // The healthy pipeline drains all of its events while the other retries its sink.
  EXPECT_TRUE(test::wait_until(
      [&] { return sqlite_count(db) >= static_cast<long>(healthy_events.distinct_records); },
      std::chrono::seconds(120)));
  EXPECT_EQ(sqlite_count(db), static_cast<long>(healthy_events.distinct_records));
  EXPECT_TRUE(test::wait_until([&] { return series_value(get("/metrics").body, failures) >= 2; },
                               std::chrono::seconds(30)))
      << "the frozen pipeline tried its sink more than once";
  EXPECT_GT(proxy.stalled_chunks(), 0u) << "the fault happened: its connects were held";
  const auto metrics = get("/metrics").body;
  EXPECT_EQ(series_value(metrics, R"(sluice_paused{pipeline="frozen",reason="sink_unavailable"})"),
            1);
  EXPECT_EQ(series_value(metrics, R"(sluice_ready{pipeline="frozen"})"), 0);
  EXPECT_EQ(series_value(metrics, R"(sluice_ready{pipeline="healthy"})"), 1);
  const auto readyz = get("/readyz");
  EXPECT_EQ(readyz.status, 503);
  EXPECT_NE(readyz.body.find("frozen sink_unavailable"), std::string::npos) << readyz.body;
  const auto status = nlohmann::json::parse(get("/pipelines").body, nullptr, false);
  bool said = false;
  for (const auto& p : status.value("pipelines", nlohmann::json::array()))
    if (p.value("pipeline", "") == "frozen") {
      EXPECT_EQ(p.value("state", ""), "sink_unavailable") << p.dump();
      EXPECT_NE(p.value("error", "").find("sink.postgres.connect_timeout"), std::string::npos)
          << p.dump();
      said = true;
    }
  EXPECT_TRUE(said) << "/pipelines shows the frozen pipeline: " << status.dump();
  const auto [ctl_code, ctl_status] = test::run_with_status(
      std::string(SLUICE_BINARY) + " ctl status --url http://" + endpoint + " 2>&1");
  EXPECT_EQ(ctl_code, 0) << ctl_status;
  EXPECT_NE(ctl_status.find("frozen  sink_unavailable"), std::string::npos) << ctl_status;
  EXPECT_NE(ctl_status.find("no answer within sink.postgres.connect_timeout"), std::string::npos)
      << ctl_status;
  EXPECT_EQ(queue_total(frozen), static_cast<int>(frozen_events.bodies.size()))
      << "nothing of the frozen pipeline's queue was received";

  // The thaw: its next attempt opens the sink and it drains too, exactly.
  proxy.stall(false);
  EXPECT_TRUE(test::wait_until(
      [&] {
        const auto text =
            pg.query("SELECT count(*) FROM pg_tables WHERE tablename = '" + table + "'") == "1\n"
                ? pg.query("SELECT count(*) FROM " + table)
                : std::string();
        return text == std::to_string(frozen_events.distinct_records) + "\n";
      },
      std::chrono::seconds(120)))
      << "the frozen pipeline caught up after the thaw";
  test::wait_until([&] { return queue_total(frozen) == 0; });
  stop_run();
  EXPECT_EQ(code, 0);
  const auto rows = pg.query("SELECT count(*) FROM " + table);
  EXPECT_EQ(rows, std::to_string(frozen_events.distinct_records) + "\n");
  EXPECT_EQ(sqlite_count(db), static_cast<long>(healthy_events.distinct_records));
  EXPECT_EQ(queue_total(healthy), 0);
  EXPECT_EQ(queue_total(frozen), 0);
  ASSERT_EQ(summaries.size(), 2u);
  for (const auto& s : summaries) EXPECT_EQ(s.never_started, "") << s.name;
  test::remove_sqlite(db);
}

// One pipeline alone exits when its sink does not answer at start (exit code 3, the
// reason and the key that bounds the wait on standard error): under an orchestrator
// the restart is the retry.
TEST_F(OperationsIsolation, OnePipelineWhoseDatabaseIsFrozenAtStartExitsWithCode3) {
  auto& pg = test::Postgres::shared();
  test::TcpFaultProxy proxy("127.0.0.1", pg.port());
  proxy.stall(true);
  const std::string queue = make_queue("isostart-alone");
  const std::string file =
      ::testing::TempDir() + "/sluice-isostart-" + std::to_string(getpid()) + ".yaml";
  std::ofstream(file) << "logging:\n  level: warn\n"
                      << test::kInventoryNormalizeYaml
                      << "source:\n  sqs:\n    queue_url: " << queue
                      << "\n    endpoint_url: " << test::Emulator::shared().endpoint()
                      << "\n    region: us-east-1\nsink:\n  type: postgres\n  postgres:\n"
                      << "    dsn: host=127.0.0.1 port=" << proxy.port()
                      << " user=postgres dbname=postgres\n    connect_timeout: 1s\n";
  const auto [exit_code, output] =
      test::run_with_status(std::string(SLUICE_BINARY) + " run --config " + file + " 2>&1");
  EXPECT_EQ(exit_code, 3) << output;
  EXPECT_NE(output.find("cannot open the sink"), std::string::npos) << output;
  EXPECT_NE(output.find("sink.postgres.connect_timeout"), std::string::npos) << output;
  EXPECT_GT(proxy.stalled_chunks(), 0u) << "the fault happened";
  std::filesystem::remove(file);
}

// --until-drained with one of several pipelines whose database never answers: the run
// ends once the other is drained, exit code 3, the frozen pipeline's summary saying
// why it never started (a batch job does not wait forever).
TEST_F(OperationsIsolation, UntilDrainedEndsWithCode3WhenAPipelineNeverOpens) {
  test::TcpFaultProxy proxy("127.0.0.1", test::Postgres::shared().port());
  proxy.stall(true);
  const std::string healthy = make_queue("isobatch-healthy"),
                    frozen = make_queue("isobatch-frozen");
  const std::string db =
      ::testing::TempDir() + "/sluice-isobatch-" + std::to_string(getpid()) + ".db";
  test::remove_sqlite(db);
  const std::string sqs = "        endpoint_url: " + test::Emulator::shared().endpoint() +
                          "\n        region: us-east-1\n        poll_wait: 1s\n";
  const auto configs = app::parse_pipelines(
      "logging:\n  level: warn\n" + std::string(test::kInventoryNormalizeYaml) +
      "pipelines:\n  healthy:\n    source:\n      sqs:\n        queue_url: " + healthy + "\n" +
      sqs + "    sink:\n      type: sqlite\n      sqlite:\n        path: " + db +
      "\n  frozen:\n    source:\n      sqs:\n        queue_url: " + frozen + "\n" + sqs +
      "    sink:\n      type: postgres\n      postgres:\n        dsn: host=127.0.0.1 port=" +
      std::to_string(proxy.port()) +
      " user=postgres dbname=postgres\n        connect_timeout: 1s\n");
  const auto events = publish(healthy, 300, 0.0, 0.0, 61);
  publish(frozen, 10, 0.0, 0.0, 62);
  app::RunOptions options;
  options.until_drained = true;
  options.drained_for = std::chrono::milliseconds(1000);
  options.quiet = true;
  std::vector<app::RunSummary> summaries;
  EXPECT_EQ(app::run_pipelines(configs, options, summaries), 3);
  EXPECT_GT(proxy.stalled_chunks(), 0u) << "the fault happened";
  EXPECT_EQ(sqlite_count(db), static_cast<long>(events.distinct_records));
  EXPECT_EQ(queue_total(healthy), 0);
  EXPECT_EQ(queue_total(frozen), 10) << "nothing of the frozen pipeline's queue was taken";
  ASSERT_EQ(summaries.size(), 2u);
  EXPECT_EQ(summaries[0].never_started, "");
  EXPECT_NE(summaries[1].never_started.find("sink.postgres.connect_timeout"), std::string::npos)
      << summaries[1].never_started;
  test::remove_sqlite(db);
}

// A stop while a pipeline's sink is being opened interrupts the attempt (a connect
// that could otherwise wait out its 300 s timeout): the run stops cleanly within its
// shutdown deadline (exit 0; past it the watchdog would end this process with code 5),
// and the summary says the pipeline never started.
TEST_F(OperationsIsolation, AStopDuringAnOpenAttemptInterruptsIt) {
  test::TcpFaultProxy proxy("127.0.0.1", test::Postgres::shared().port());
  proxy.stall(true);
  const std::string healthy = make_queue("isostop-healthy"), frozen = make_queue("isostop-frozen");
  const std::string db =
      ::testing::TempDir() + "/sluice-isostop-" + std::to_string(getpid()) + ".db";
  test::remove_sqlite(db);
  const std::string sqs = "        endpoint_url: " + test::Emulator::shared().endpoint() +
                          "\n        region: us-east-1\n        poll_wait: 1s\n";
  const auto configs = app::parse_pipelines(
      "logging:\n  level: warn\nsource:\n  shutdown_deadline: 20s\n" +
      std::string(test::kInventoryNormalizeYaml) +
      "pipelines:\n  healthy:\n    source:\n      sqs:\n        queue_url: " + healthy + "\n" +
      sqs + "    sink:\n      type: sqlite\n      sqlite:\n        path: " + db +
      "\n  frozen:\n    source:\n      sqs:\n        queue_url: " + frozen + "\n" + sqs +
      "    sink:\n      type: postgres\n      postgres:\n        dsn: host=127.0.0.1 port=" +
      std::to_string(proxy.port()) +
      " user=postgres dbname=postgres\n        connect_timeout: 300s\n");
  const auto events = publish(healthy, 100, 0.0, 0.0, 71);
  app::RunOptions options;
  options.quiet = true;
  std::vector<app::RunSummary> summaries;
  int code = -1;
  std::atomic<bool> running{true};
  std::thread run([&] {
    code = app::run_pipelines(configs, options, summaries);
    running = false;
  });
  // The healthy pipeline at work and the frozen one's connect held by the proxy.
  EXPECT_TRUE(test::wait_until(
      [&] { return sqlite_count(db) == static_cast<long>(events.distinct_records); }));
  EXPECT_TRUE(test::wait_until([&] { return proxy.stalled_chunks() > 0; }))
      << "the frozen pipeline's first attempt reached the stalled database";
  if (running) raise(SIGTERM);
  run.join();
  EXPECT_EQ(code, 0);
  ASSERT_EQ(summaries.size(), 2u);
  EXPECT_EQ(summaries[0].never_started, "");
  EXPECT_FALSE(summaries[1].never_started.empty());
  EXPECT_EQ(queue_total(frozen), 0) << "an empty queue";
  test::remove_sqlite(db);
}
