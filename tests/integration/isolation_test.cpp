// Several pipelines in one process do not hold each other up: with one pipeline's
// PostgreSQL frozen (the fault proxy: connections open, nothing forwarded), the other
// drains its whole backlog to exactly its distinct records; once the database answers
// again the frozen one drains too, exactly. The fault is proven (chunks held back by
// the proxy, the frozen pipeline's rows short of its events while the other finished).
// The drain time of the healthy pipeline, alone and beside the frozen one, is printed
// as a figure, not asserted (these machines are noisy).
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "app/config.hpp"
#include "app/run.hpp"
#include "support/fault_proxy.hpp"
#include "support/pipeline.hpp"
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
