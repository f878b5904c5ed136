// FIFO end to end: `sluice run` on a FIFO queue of the real emulator writes each
// message group's records in queue order (proved by an insertion-order column:
// SQLite's rowid, a PostgreSQL bigserial), every record once, groups in parallel;
// a write failure in one group sends the rest of that group back, to arrive later in
// order while the other groups go on.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <thread>

#include "app/run.hpp"
#include "config/config.hpp"
#include "sinks/postgres/postgres_sink.hpp"
#include "sinks/sqlite/sqlite_sink.hpp"
#include "sluice/driver/sink.hpp"
#include "sluice/sqs/client.hpp"
#include "sluice/sqs/publisher.hpp"
#include "sqs/driver.hpp"
#include "support/emulator.hpp"
#include "support/local_sqs.hpp"
#include "support/ordered_drain.hpp"
#include "support/pipeline.hpp"
#include "support/run.hpp"
#include "support/wait.hpp"

namespace asio = boost::asio;
using namespace sluice;
using namespace std::chrono_literals;

namespace {

constexpr int kGroups = 20, kPerGroup = 300;

std::string fifo_yaml(const std::string& url, const std::string& sink_section) {
  return "source:\n  sqs:\n    queue_url: " + url +
         "\n    endpoint_url: " + test::Emulator::shared().endpoint() +
         "\n    region: us-east-1\n    poll_wait: 1s\n    delete_flush_interval: 10ms\n"
         "  concurrency: 4\n  max_in_flight: 200\n  failure_backoff: 1s\n"
         "normalize:\n  fields:\n"
         "    - {name: group, from: /group, required: true}\n"
         "    - {name: seq, from: /seq, type: integer, required: true}\n"
         "    - {name: groupId, meta: group_id}\n"
         "    - {name: sequenceNumber, meta: sequence_number}\n"
         "identity:\n  versions:\n    V1: [group, seq]\n"
         "metrics:\n  listen: ''\nlogging:\n  level: warn\n" +
         sink_section;
}

class FifoPipeline : public test::PipelineFixture {
 protected:
  // kGroups x kPerGroup messages, sent in sequence order within every group.
  std::string fifo_queue_with_events(const std::string& prefix) {
    const std::string name = test::unique_queue_name(prefix) + ".fifo";
    sqs::QueueAttributes attributes;
    attributes["FifoQueue"] = "true";
    test::run(io_, client_->create_queue(name, attributes));
    const std::string url = test::Emulator::shared().queue_url(name);
    std::vector<sqs::SendMessageEntry> entries;
    for (int seq = 0; seq < kPerGroup; ++seq)
      for (int g = 0; g < kGroups; ++g) {
        sqs::SendMessageEntry e;
        const std::string group = "g" + std::to_string(g);
        e.body = R"({"group":")" + group + R"(","seq":)" + std::to_string(seq) + "}";
        e.message_group_id = group;
        e.message_deduplication_id = group + "-" + std::to_string(seq);
        entries.push_back(std::move(e));
      }
    sqs::Publisher publisher(client_, url);
    for (const auto& o : test::run(io_, publisher.send_batch(std::move(entries))))
      EXPECT_TRUE(o.ok) << o.error_message;
    return url;
  }
};

std::string sqlite(const std::string& db, const std::string& sql) {
  const std::string command = "sqlite3 -batch '" + db + "' \"" + sql + "\"";
  std::string out;
  if (FILE* p = popen(command.c_str(), "r")) {
    char buffer[4096];
    while (std::size_t n = fread(buffer, 1, sizeof buffer, p)) out.append(buffer, n);
    pclose(p);
  }
  return out;
}

}  // namespace

TEST_F(FifoPipeline, EachGroupsRowsReachSqliteInSequenceOrder) {
  const std::string url = fifo_queue_with_events("fifo-sqlite");
  const std::string db = ::testing::TempDir() + "/sluice-fifo-" + std::to_string(getpid()) + ".db";
  test::remove_sqlite(db);
  // At the defaults' source.concurrency (auto for SQS), which the other tests here fix.
  std::string yaml = fifo_yaml(
      url, "sink:\n  type: sqlite\n  batch_timeout: 2ms\n  sqlite:\n    path: " + db + "\n");
  yaml.erase(yaml.find("  concurrency: 4\n"), 17);
  const auto config = app::parse_config(yaml);
  EXPECT_TRUE(config.container.auto_concurrency);
  EXPECT_EQ(config.source_as<sqs::SqsSettings>().source.fifo, FifoMode::auto_detect);
  const auto summary = run_until_drained(config);
  EXPECT_EQ(summary.written, static_cast<std::uint64_t>(kGroups * kPerGroup));
  EXPECT_EQ(queue_total(url), 0);
  // rowid is the order of insertion: within a group, seq goes 0, 1, 2, ... with no gap.
  const std::string by_group =
      "SELECT json_extract(document,'$.group') AS g, json_extract(document,'$.seq') AS s, "
      "json_extract(document,'$.sequenceNumber') AS n, json_extract(document,'$.groupId') AS gid, "
      "rowid AS r FROM records";
  EXPECT_EQ(
      sqlite(db, "SELECT count(*), count(DISTINCT g), min(s), max(s) FROM (" + by_group + ")"),
      std::to_string(kGroups * kPerGroup) + "|" + std::to_string(kGroups) + "|0|" +
          std::to_string(kPerGroup - 1) + "\n");
  EXPECT_EQ(sqlite(db,
                   "SELECT count(*) FROM (SELECT s, lag(s) OVER (PARTITION BY g ORDER BY r) "
                   "AS p FROM (" +
                       by_group + ")) WHERE p IS NOT NULL AND s <> p + 1"),
            "0\n")
      << "a group's rows were inserted out of sequence order";
  // The FIFO metadata reached the documents: the group, and SequenceNumber growing with seq.
  EXPECT_EQ(sqlite(db, "SELECT count(*) FROM (" + by_group + ") WHERE gid <> g OR n IS NULL"),
            "0\n");
  EXPECT_EQ(sqlite(db,
                   "SELECT count(*) FROM (SELECT n, lag(n) OVER (PARTITION BY g ORDER BY s) AS p "
                   "FROM (" +
                       by_group +
                       ")) WHERE p IS NOT NULL AND (length(n) < length(p) OR (length(n) = "
                       "length(p) AND n <= p))"),
            "0\n");
  test::remove_sqlite(db);
}

TEST_F(FifoPipeline, EachGroupsRowsReachPostgresInOrderAndAFailedWriteSendsItsGroupBack) {
  auto& pg = test::Postgres::shared();
  const std::string url = fifo_queue_with_events("fifo-pg");
  const std::string table = "fifo_" + std::to_string(getpid());
  // The sink's own table, plus an insertion-order column and a trigger that refuses
  // g7's record 150 once (a sequence is not rolled back with the failed insert).
  pg.query("CREATE TABLE " + table +
           " (hash text NOT NULL, message_id text, document jsonb NOT NULL, written_at "
           "timestamptz NOT NULL DEFAULT now(), ord bigserial)");
  pg.query("CREATE SEQUENCE " + table + "_failures");
  // (The body is quoted with '' rather than $$, which psql's shell would expand.)
  pg.query("CREATE FUNCTION " + table +
           "_fail_once() RETURNS trigger AS 'BEGIN IF NEW.document->>''group'' = ''g7'' AND "
           "NEW.document->>''seq'' = ''150'' AND nextval(''" +
           table +
           "_failures'') = 1 THEN RAISE EXCEPTION ''injected failure''; END IF; RETURN NEW; END' "
           "LANGUAGE plpgsql");
  pg.query("CREATE TRIGGER fail_once BEFORE INSERT ON " + table +
           " FOR EACH ROW EXECUTE FUNCTION " + table + "_fail_once()");
  // One record per write and one attempt: the failure nacks g7:150 alone.
  const auto config = app::parse_config(fifo_yaml(
      url, "sink:\n  type: postgres\n  table: " + table +
               "\n  batch_size: 1\n  writers: 4\n  max_attempts: 1\n  postgres:\n    dsn: " +
               pg.dsn() + "\n"));
  run_until_drained(config);
  EXPECT_EQ(pg.query("SELECT last_value FROM " + table + "_failures"), "2\n")
      << "the injected failure happened once, and the retry went through";
  EXPECT_EQ(queue_total(url), 0);
  const std::string rows =
      "SELECT document->>'group' AS g, (document->>'seq')::int AS s, ord FROM " + table;
  EXPECT_EQ(pg.query("SELECT count(*), count(DISTINCT g) FROM (" + rows + ") x"),
            std::to_string(kGroups * kPerGroup) + "|" + std::to_string(kGroups) + "\n");
  EXPECT_EQ(pg.query("SELECT count(*) FROM (SELECT s, lag(s) OVER (PARTITION BY g ORDER BY ord) AS "
                     "p FROM (" +
                     rows + ") x) y WHERE p IS NOT NULL AND s <> p + 1"),
            "0\n")
      << "a group's rows were inserted out of sequence order";
  // While g7 waited for its retry (1 s backoff), the other groups went on.
  EXPECT_GT(std::stoi(pg.query("SELECT count(*) FROM (" + rows +
                               ") x WHERE g <> 'g7' AND ord > (SELECT ord FROM (" + rows +
                               ") a WHERE g = 'g7' AND s = 149) AND ord < (SELECT ord FROM (" +
                               rows + ") b WHERE g = 'g7' AND s = 150)")),
            100);
}

// ---------------------------------------------------------------- group runs
// The emulator gives one message per group per receive; SQS gives up to 10. An
// in-process source that does (support/fake_source.hpp) shows the path real SQS takes:
// a group's run goes to the writers in one hand-over, is written in order by one writer
// at a time (several writers here), and settles as a whole; a failure sends the rest of
// its run back, to arrive again in order.
TEST_F(FifoPipeline, GroupRunsReachSqliteInOrderAndARefusedRecordLeavesItsRunGoingOn) {
  const std::string db =
      ::testing::TempDir() + "/sluice-fifo-runs-" + std::to_string(getpid()) + ".db";
  test::remove_sqlite(db);
  // The sink's table, with a trigger that refuses g3:155 for good (in the middle of the
  // run g3:150-159).
  sqlite(db,
         "CREATE TABLE records (hash TEXT NOT NULL, message_id TEXT, document TEXT NOT NULL, "
         "written_at TEXT); CREATE TRIGGER refuse BEFORE INSERT ON records WHEN "
         "NEW.message_id = 'g3:155' BEGIN SELECT RAISE(ABORT, 'refused g3:155'); END;");
  sinks::SqliteOptions sqlite_options;
  sqlite_options.path = db;
  test::OrderedDrainOptions options;
  options.groups = kGroups;
  options.per_group = kPerGroup;
  options.writers = 2;
  const auto outcome =
      test::drain_ordered([&] { return sinks::make_sqlite_sink(sqlite_options); }, options);
  ASSERT_TRUE(outcome.drained);
  EXPECT_GT(outcome.longest_run, 1) << "a group's messages went to the writers together";
  EXPECT_TRUE(outcome.released.empty()) << "a refused record is settled: its run goes on";
  const std::string rows =
      "SELECT json_extract(document,'$.group') AS g, json_extract(document,'$.seq') AS s, "
      "rowid AS r FROM records";
  EXPECT_EQ(sqlite(db, "SELECT count(*), count(DISTINCT g || ':' || s) FROM (" + rows + ")"),
            std::to_string(kGroups * kPerGroup - 1) + "|" +
                std::to_string(kGroups * kPerGroup - 1) + "\n")
      << "every record once, but the refused one";
  EXPECT_EQ(sqlite(db, "SELECT message_id, reason FROM rejects"), "g3:155|sink_refused\n");
  // rowid is the order of insertion: within a group, seq rises with no gap but 155 of g3.
  EXPECT_EQ(sqlite(db,
                   "SELECT count(*) FROM (SELECT g, s, lag(s) OVER (PARTITION BY g ORDER BY r) "
                   "AS p FROM (" +
                       rows +
                       ")) WHERE p IS NOT NULL AND s <> p + 1 AND NOT (g = 'g3' AND s = "
                       "156 AND p = 154)"),
            "0\n")
      << "a group's rows were inserted out of sequence order";
  test::remove_sqlite(db);
}

TEST_F(FifoPipeline, GroupRunsReachPostgresInOrderAndAFailureSendsTheRestOfItsRunBack) {
  auto& pg = test::Postgres::shared();
  const std::string table = "fifo_runs_" + std::to_string(getpid());
  // The sink's table with an insertion-order column, and a trigger that fails the
  // write holding g7:155 once (not for good: it is retried, its run released).
  pg.query("CREATE TABLE " + table +
           " (hash text NOT NULL, message_id text, document jsonb NOT NULL, written_at "
           "timestamptz NOT NULL DEFAULT now(), ord bigserial)");
  pg.query("CREATE SEQUENCE " + table + "_failures");
  pg.query("CREATE FUNCTION " + table +
           "_fail_once() RETURNS trigger AS 'BEGIN IF NEW.message_id = ''g7:155'' AND nextval(''" +
           table +
           "_failures'') = 1 THEN RAISE EXCEPTION ''injected failure''; END IF; RETURN NEW; END' "
           "LANGUAGE plpgsql");
  pg.query("CREATE TRIGGER fail_once BEFORE INSERT ON " + table +
           " FOR EACH ROW EXECUTE FUNCTION " + table + "_fail_once()");
  sinks::PostgresOptions postgres;
  postgres.dsn = pg.dsn();
  postgres.table = table;
  test::OrderedDrainOptions options;
  options.groups = kGroups;
  options.per_group = kPerGroup;
  // Batches of 4: a run of 10 spans three, so the rest of g7's run waits in the writers'
  // queue when its write fails (skipped there, never written), and four writers would
  // take a run's later batches out of turn if a group were not one writer's at a time.
  options.batch_size = 4;
  const auto outcome =
      test::drain_ordered([&] { return sinks::make_postgres_sink(postgres); }, options);
  ASSERT_TRUE(outcome.drained);
  EXPECT_EQ(pg.query("SELECT last_value FROM " + table + "_failures"), "2\n")
      << "the injected failure happened once, and the retry went through";
  EXPECT_GT(outcome.longest_run, 1) << "a group's messages went to the writers together";
  EXPECT_TRUE(std::ranges::any_of(outcome.retried, [](const std::string& id) {
    return id.starts_with("g7:15");
  })) << "the write of g7's run failed";
  // The rest of the run that held g7:155 went back unwritten, though it was out: each of
  // its later messages either failed with it (same batch) or was released (a later batch,
  // skipped in the writers' queue). Where the run ends depends on what each receive had
  // room for, so the run is the one the handler was given.
  const auto failed_run = std::ranges::find_if(
      outcome.runs, [](const auto& run) { return std::ranges::find(run, "g7:155") != run.end(); });
  ASSERT_NE(failed_run, outcome.runs.end());
  for (auto id = std::ranges::find(*failed_run, "g7:155") + 1; id != failed_run->end(); ++id)
    EXPECT_EQ(std::ranges::count(outcome.retried, *id) + std::ranges::count(outcome.released, *id),
              1)
        << *id << " of the failed run (" << failed_run->front() << " to " << failed_run->back()
        << ")";
  // And nothing else went back: a released message's run had a message in a failed write.
  for (const auto& id : outcome.released) {
    const auto run = std::ranges::find_if(outcome.runs, [&](const auto& r) {
      return std::ranges::find(r, id) != r.end() && std::ranges::any_of(r, [&](const auto& m) {
               return std::ranges::find(outcome.retried, m) != outcome.retried.end();
             });
    });
    EXPECT_NE(run, outcome.runs.end()) << id << " was released, though its run never failed";
  }
  const std::string rows =
      "SELECT document->>'group' AS g, (document->>'seq')::int AS s, ord FROM " + table;
  EXPECT_EQ(pg.query("SELECT count(*), count(DISTINCT g || ':' || s) FROM (" + rows + ") x"),
            std::to_string(kGroups * kPerGroup) + "|" + std::to_string(kGroups * kPerGroup) + "\n")
      << "every record once";
  EXPECT_EQ(pg.query("SELECT count(*) FROM (SELECT s, lag(s) OVER (PARTITION BY g ORDER BY ord) AS "
                     "p FROM (" +
                     rows + ") x) y WHERE p IS NOT NULL AND s <> p + 1"),
            "0\n")
      << "a group's rows were inserted out of sequence order";
}
