// The sinks against real databases: SQLite (a file), PostgreSQL 15 (a private
// cluster) and CongoDB (a MongoDB-wire server; it does not enforce unique
// secondary indexes, so with it only the _id-from-hash identity can be proven).
#include <gtest/gtest.h>
#include <mongoc/mongoc.h>
#include <sqlite3.h>

#include <filesystem>
#include <functional>
#include <map>

#include "pipeline/transform.hpp"
#include "runtime/message_state.hpp"
#include "sinks/mongodb/mongo_sink.hpp"
#include "sinks/postgres/postgres_sink.hpp"
#include "sinks/sqlite/sqlite_sink.hpp"
#include "sinks/writer.hpp"
#include "sluice/driver/sink.hpp"
#include "support/emulator.hpp"
#include "support/pipeline.hpp"
#include "support/wait.hpp"

using namespace sluice;
using sinks::WriteOutcome;

namespace {

pipeline::Record record(const std::string& sku, int quantity, const std::string& message_id) {
  pipeline::Record r;
  r.hash = pipeline::content_hash("V1", {sku, quantity});
  r.message_id = message_id;
  r.document["skuId"] = sku;
  r.document["quantity"] = quantity;
  r.document["documentHash"] = r.hash;
  return r;
}

// The behaviour every sink must have: insert first, duplicates (across batches and
// within one batch) reported as such, one outcome per record in order.
void check_idempotent_batches(sinks::Sink& sink) {
  sink.open();
  sink.open();  // tables and indexes: created once, reopening is harmless
  const std::vector<pipeline::Record> first{record("A", 1, "m1"), record("B", 2, "m2"),
                                            record("A", 1, "m3")};
  EXPECT_EQ(sink.write(first).outcomes,
            (std::vector<WriteOutcome>{WriteOutcome::inserted, WriteOutcome::inserted,
                                       WriteOutcome::duplicate}));
  const std::vector<pipeline::Record> second{record("B", 2, "m4"), record("C", 3, "m5")};
  EXPECT_EQ(sink.write(second).outcomes,
            (std::vector<WriteOutcome>{WriteOutcome::duplicate, WriteOutcome::inserted}));
  EXPECT_EQ(sink.count_records(), 3u);
  sink.write_rejects(
      std::vector<sinks::RejectRow>{{"m9", "malformed", "not JSON", "{oops", "q", "", ""}});
}

// route: records into several tables in one batch, each table with its own unique
// index; outcomes in the batch's order; each table holds exactly its records.
// `make(table, routes)` makes the sink under test.
void check_routed_batches(
    const std::function<std::unique_ptr<sinks::Sink>(const std::string&, std::vector<std::string>)>&
        make,
    const std::string& base) {
  const std::string placed = base + "_placed", cancelled = base + "_cancelled";
  auto sink = make(base, {placed, cancelled});
  sink->open();
  auto routed = [](pipeline::Record r, std::uint16_t route) {
    r.route = route;
    return r;
  };
  const std::vector<pipeline::Record> batch{
      routed(record("A", 1, "m1"), 1), routed(record("B", 1, "m2"), 0),
      routed(record("C", 1, "m3"), 2), routed(record("D", 1, "m4"), 1),
      routed(record("A", 1, "m5"), 1), routed(record("C", 1, "m6"), 2)};
  EXPECT_EQ(sink->write(batch).outcomes,
            (std::vector<WriteOutcome>{WriteOutcome::inserted, WriteOutcome::inserted,
                                       WriteOutcome::inserted, WriteOutcome::inserted,
                                       WriteOutcome::duplicate, WriteOutcome::duplicate}));
  EXPECT_EQ(sink->write(std::vector<pipeline::Record>{routed(record("D", 1, "m7"), 1),
                                                      routed(record("E", 1, "m8"), 2)})
                .outcomes,
            (std::vector<WriteOutcome>{WriteOutcome::duplicate, WriteOutcome::inserted}))
      << "a later batch finds the earlier one's rows in the routed table";
  EXPECT_EQ(sink->count_records(), 5u) << "every table's records";
  EXPECT_EQ(make(base, {})->count_records(), 1u);
  EXPECT_EQ(make(placed, {})->count_records(), 2u);
  EXPECT_EQ(make(cancelled, {})->count_records(), 2u);
}

// The rejects table as `sluice rejects` reads it: oldest first, by reason, in pages,
// and marked replayed.
void check_rejects_are_read_and_marked(sinks::Sink& sink) {
  sink.open();
  std::vector<sinks::RejectRow> rows;
  for (int i = 0; i < 7; ++i)
    rows.push_back({"m" + std::to_string(i), i % 2 ? "validation" : "malformed",
                    "why " + std::to_string(i), R"({"n":)" + std::to_string(i) + "}", "q", "", ""});
  rows[2].properties = R"({"receive_count":2,"headers":{"tenant":"acme"}})";
  sink.write_rejects(rows);
  sinks::RejectQuery all;
  const auto read = sink.read_rejects(all);
  ASSERT_EQ(read.size(), 7u);
  for (int i = 0; i < 7; ++i) {
    EXPECT_EQ(read[i].row.message_id, "m" + std::to_string(i)) << "oldest first";
    EXPECT_EQ(read[i].row.body, rows[i].body);
    EXPECT_EQ(read[i].row.detail, rows[i].detail);
    EXPECT_EQ(read[i].rejected_at.size(), 24u) << read[i].rejected_at;  // ...T12:00:00.000Z
    EXPECT_TRUE(read[i].replayed_at.empty());
    EXPECT_EQ(read[i].row.properties, rows[i].properties) << "kept for a replay, or empty";
  }
  sinks::RejectQuery validation;
  validation.reason = "validation";
  validation.limit = 2;
  auto page = sink.read_rejects(validation);
  ASSERT_EQ(page.size(), 2u);
  EXPECT_EQ(page[1].row.message_id, "m3");
  validation.after_id = page.back().id;
  page = sink.read_rejects(validation);
  ASSERT_EQ(page.size(), 1u) << "the page after m3: m5 only";
  EXPECT_EQ(page[0].row.message_id, "m5");
  const std::vector<std::string> marked{read[1].id, read[4].id};
  sink.mark_replayed(marked);
  const auto left = sink.read_rejects(all);
  ASSERT_EQ(left.size(), 5u) << "replayed rows are left out";
  for (const auto& r : left) EXPECT_TRUE(r.row.message_id != "m1" && r.row.message_id != "m4");
  all.replayed = true;
  const auto every = sink.read_rejects(all);
  ASSERT_EQ(every.size(), 7u);
  EXPECT_FALSE(every[1].replayed_at.empty());
  EXPECT_FALSE(every[4].replayed_at.empty());
  EXPECT_TRUE(every[0].replayed_at.empty());
  // One row per message, reason and pipeline: the same rows again (their messages
  // delivered again after their rows were written) change nothing; the same message
  // with another reason, or of another pipeline, is a row of its own.
  sink.write_rejects(rows);
  EXPECT_EQ(sink.read_rejects(all).size(), 7u) << "written once";
  auto other_reason = rows[0], of_a = rows[0], of_b = rows[0], other_body = rows[0];
  other_reason.reason = "schema_drift";
  of_a.pipeline = "a";
  of_b.pipeline = "b";
  other_body.body = "another body under a reused id";
  sink.write_rejects(
      std::vector<sinks::RejectRow>{other_reason, of_a, of_b, of_b, of_a, other_body, other_body});
  EXPECT_EQ(sink.read_rejects(all).size(), 11u);
  sinks::RejectQuery only_b = all;
  only_b.pipeline = "b";
  const auto b_rows = sink.read_rejects(only_b);
  ASSERT_EQ(b_rows.size(), 1u) << "a pipeline reads its own rows";
  EXPECT_EQ(b_rows[0].row.pipeline, "b");
  EXPECT_EQ(b_rows[0].row.message_id, "m0");
}

// Positions a batch brings forward, in the batch's own transaction: a batch the database
// refuses after its position was written (the position goes first) leaves both the
// records and the position as they were. `refuse(hash)` makes the database refuse the
// record of that hash from then on.
void check_positions_go_with_their_records(sinks::Sink& sink,
                                           const std::function<void(const std::string&)>& refuse) {
  sink.open();
  ASSERT_TRUE(sink.positions_with_records());
  const std::string key = "stream:q@" + std::to_string(getpid());
  const std::vector<sinks::PositionUpdate> at_10{{key, "10"}}, at_20{{key, "20"}},
      at_30{{key, "30"}};
  EXPECT_EQ(sink.write_with_positions(std::vector{record("P", 1, "m1")}, at_10).outcomes,
            std::vector<WriteOutcome>{WriteOutcome::inserted});
  EXPECT_EQ(sink.load_position(key), "10");
  const auto refused = record("P", 3, "m3");
  refuse(refused.hash);
  EXPECT_THROW(sink.write_with_positions(std::vector{record("P", 2, "m2"), refused}, at_20),
               sinks::SinkError);
  EXPECT_EQ(sink.load_position(key), "10") << "the position rolled back with its batch";
  EXPECT_EQ(sink.count_records(), 1u) << "and so did the record before the refused one";
  EXPECT_EQ(sink.write_with_positions(std::vector{record("P", 2, "m2")}, at_30).outcomes,
            std::vector<WriteOutcome>{WriteOutcome::inserted});
  EXPECT_EQ(sink.load_position(key), "30");
  EXPECT_TRUE(sink.write_with_positions({}, at_20).outcomes.empty()) << "a position alone";
  EXPECT_EQ(sink.load_position(key), "20");
}

}  // namespace

TEST(SqliteSink, PositionsAreWrittenInTheBatchsTransaction) {
  const std::string path =
      ::testing::TempDir() + "/sluice-positions-" + std::to_string(getpid()) + ".db";
  test::remove_sqlite(path);
  sinks::SqliteOptions options;
  options.path = path;
  auto sink = sinks::make_sqlite_sink(options);
  check_positions_go_with_their_records(*sink, [&](const std::string& hash) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db,
                           ("CREATE TRIGGER refuse BEFORE INSERT ON records WHEN NEW.hash = '" +
                            hash + "' BEGIN SELECT RAISE(ABORT, 'refused by the test'); END")
                               .c_str(),
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(db);
  });
  test::remove_sqlite(path);
}

TEST(PostgresSink, PositionsAreWrittenInTheBatchsTransaction) {
  auto& pg = test::Postgres::shared();
  sinks::PostgresOptions options;
  options.dsn = pg.dsn();
  options.table = "positions_" + std::to_string(getpid());
  auto sink = sinks::make_postgres_sink(options);
  check_positions_go_with_their_records(*sink, [&](const std::string& hash) {
    pg.query("CREATE FUNCTION " + options.table +
             "_refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN IF NEW.hash = '" + hash +
             "' THEN RAISE EXCEPTION 'refused by the test'; END IF; RETURN NEW; END $$; "
             "CREATE TRIGGER refuse BEFORE INSERT ON " +
             options.table + " FOR EACH ROW EXECUTE FUNCTION " + options.table + "_refuse()");
  });
  pg.query("DROP TABLE " + options.table + "; DROP FUNCTION " + options.table + "_refuse()");
}

// MongoDB: the records first, then the positions (no transaction on a standalone
// server, nor on the wire server here). That server refuses the string _id a position
// is kept under (MongoDB takes it), so what this proves is the order: the position's
// failure comes after the batch's records were written, and is the batch's error.
TEST(MongoSink, PositionsAreSavedAfterTheirRecords) {
  sinks::MongoOptions options;
  options.uri = test::MongoWire::shared().uri();
  options.database = "sluice_test";
  options.collection = "positions_" + std::to_string(getpid());
  options.write_concern = "1";
  auto sink = sinks::make_mongo_sink(options);
  sink->open();
  EXPECT_FALSE(sink->positions_with_records());
  const std::string key = "stream:q@" + std::to_string(getpid());
  EXPECT_THROW(sink->write_with_positions(std::vector{record("P", 1, "m1")},
                                          std::vector<sinks::PositionUpdate>{{key, "10"}}),
               sinks::SinkError)
      << "the wire server refuses a string _id";
  EXPECT_EQ(sink->count_records(), 1u) << "the records went first";
}

TEST(SqliteSink, RejectsAreReadAndMarkedReplayedAndAnOldTableGetsTheColumn) {
  const std::string path =
      ::testing::TempDir() + "/sluice-rejects-" + std::to_string(getpid()) + ".db";
  test::remove_sqlite(path);
  {  // the rejects table as an earlier release made it
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db,
                           "CREATE TABLE rejects (id INTEGER PRIMARY KEY, message_id TEXT, reason "
                           "TEXT NOT NULL, detail TEXT, body TEXT, source TEXT, rejected_at TEXT "
                           "NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')))",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(db);
  }
  sinks::SqliteOptions options;
  options.path = path;
  auto sink = sinks::make_sqlite_sink(options);
  check_rejects_are_read_and_marked(*sink);
  sink->open();  // again: the column is there, nothing to add
  test::remove_sqlite(path);
}

TEST(PostgresSink, RejectsAreReadAndMarkedReplayedAndAnOldTableGetsTheColumn) {
  auto& pg = test::Postgres::shared();
  sinks::PostgresOptions options;
  options.dsn = pg.dsn();
  options.table = "rj_records_" + std::to_string(getpid());
  options.rejects_table = "rj_rejects_" + std::to_string(getpid());
  pg.query("CREATE TABLE " + options.rejects_table +
           " (id bigserial PRIMARY KEY, message_id text, reason text NOT NULL, detail text, body "
           "text, source text, rejected_at timestamptz NOT NULL DEFAULT now())");
  auto sink = sinks::make_postgres_sink(options);
  check_rejects_are_read_and_marked(*sink);
  EXPECT_EQ(
      pg.query("SELECT count(*) FROM " + options.rejects_table + " WHERE replayed_at IS NOT NULL"),
      "2\n");
}

TEST(MongoSink, RejectsAreReadAndMarkedReplayed) {
  sinks::MongoOptions options;
  options.uri = test::MongoWire::shared().uri();
  options.database = "sluice_test";
  options.collection = "rj_records_" + std::to_string(getpid());
  options.rejects_collection = "rj_rejects_" + std::to_string(getpid());
  options.write_concern = "1";
  auto sink = sinks::make_mongo_sink(options);
  check_rejects_are_read_and_marked(*sink);
}

TEST(SqliteSink, RoutedRecordsGoToTheirTables) {
  const std::string path =
      ::testing::TempDir() + "/sluice-routes-" + std::to_string(getpid()) + ".db";
  test::remove_sqlite(path);
  check_routed_batches(
      [&](const std::string& table, std::vector<std::string> routes) {
        sinks::SqliteOptions options;
        options.path = path;
        options.table = table;
        options.routes = std::move(routes);
        return sinks::make_sqlite_sink(options);
      },
      "events");
  test::remove_sqlite(path);
}

TEST(PostgresSink, RoutedRecordsGoToTheirTablesInOneTransaction) {
  auto& pg = test::Postgres::shared();
  const std::string base = "routed_" + std::to_string(getpid());
  check_routed_batches(
      [&](const std::string& table, std::vector<std::string> routes) {
        sinks::PostgresOptions options;
        options.dsn = pg.dsn();
        options.table = table;
        options.routes = std::move(routes);
        options.columns = {{"skuId", pipeline::FieldType::string}};
        return sinks::make_postgres_sink(options);
      },
      base);
  EXPECT_EQ(
      pg.query("SELECT string_agg(\"skuId\", ',' ORDER BY \"skuId\") FROM " + base + "_placed"),
      "A,D\n");
  // One transaction for the batch: a record refused in one table (jsonb takes no
  // \u0000) leaves none of its batch mates in another.
  sinks::PostgresOptions options;
  options.dsn = pg.dsn();
  options.table = base;
  options.routes = {base + "_placed", base + "_cancelled"};
  auto sink = sinks::make_postgres_sink(options);
  auto fine = record("F", 1, "m9");
  fine.route = 1;
  auto refused = record("G", 1, "m10");
  refused.document["skuId"] = std::string("G\0", 2);
  refused.route = 2;
  try {
    sink->write(std::vector<pipeline::Record>{fine, refused});
    ADD_FAILURE() << "PostgreSQL took a \\u0000 in jsonb";
  } catch (const sinks::SinkError& e) {
    EXPECT_EQ(e.kind(), sinks::SinkFailure::refused) << e.what();
  }
  EXPECT_EQ(pg.query("SELECT count(*) FROM " + base + "_placed WHERE \"skuId\" = 'F'"), "0\n");
  EXPECT_EQ(pg.query("SELECT count(*) FROM pg_indexes WHERE indexdef LIKE '%UNIQUE%' AND "
                     "tablename LIKE '" +
                     base + "%'"),
            "3\n")
      << "a unique index on each table";
}

TEST(MongoSink, RoutedRecordsGoToTheirCollections) {
  const std::string base = "routed_" + std::to_string(getpid());
  check_routed_batches(
      [&](const std::string& table, std::vector<std::string> routes) {
        sinks::MongoOptions options;
        options.uri = test::MongoWire::shared().uri();
        options.database = "sluice_test";
        options.collection = table;
        options.routes = std::move(routes);
        options.write_concern = "1";
        return sinks::make_mongo_sink(options);
      },
      base);
}

TEST(SqliteSink, InsertFirstUnderAUniqueIndex) {
  const std::string path =
      ::testing::TempDir() + "/sluice-sink-" + std::to_string(getpid()) + ".db";
  test::remove_sqlite(path);
  sinks::SqliteOptions options;
  options.path = path;
  auto sink = sinks::make_sqlite_sink(options);
  check_idempotent_batches(*sink);
  // A second connection (another process, say) sees the same records and index.
  auto other = sinks::make_sqlite_sink(options);
  other->open();
  EXPECT_EQ(other->write(std::vector<pipeline::Record>{record("C", 3, "x")}).outcomes,
            std::vector<WriteOutcome>{WriteOutcome::duplicate});
  test::remove_sqlite(path);
}

TEST(SqliteSink, UnwritableFileIsASinkError) {
  sinks::SqliteOptions options;
  options.path = "/proc/sluice-cannot-write-here.db";
  auto sink = sinks::make_sqlite_sink(options);
  EXPECT_THROW(sink->open(), sinks::SinkError);
}

TEST(PostgresSink, InsertOnConflictDoNothing) {
  auto& pg = test::Postgres::shared();
  sinks::PostgresOptions options;
  options.dsn = pg.dsn();
  options.table = "records_" + std::to_string(getpid());
  options.columns = {{"skuId", pipeline::FieldType::string},
                     {"quantity", pipeline::FieldType::integer}};
  auto sink = sinks::make_postgres_sink(options);
  check_idempotent_batches(*sink);
  EXPECT_EQ(
      pg.query("SELECT count(*) FROM " + options.table + " WHERE \"skuId\" = 'A' AND quantity = 1"),
      "1\n");
  EXPECT_EQ(pg.query("SELECT document->>'skuId' FROM " + options.table + " WHERE quantity = 3"),
            "C\n");
  EXPECT_EQ(pg.query("SELECT indexdef LIKE '%UNIQUE%' FROM pg_indexes WHERE tablename = '" +
                     options.table + "'"),
            "t\n");
}

// Typed columns of the normalized types: a timestamp as text or as epoch milliseconds
// (the server converts the count), an exact decimal, a uuid, a nested name.
TEST(PostgresSink, TypedColumnsOfTimestampsDecimalsAndUuids) {
  auto& pg = test::Postgres::shared();
  sinks::PostgresOptions options;
  options.dsn = pg.dsn();
  options.table = "typed_" + std::to_string(getpid());
  options.columns = {{"at", pipeline::FieldType::timestamp},
                     {"atMs", pipeline::FieldType::timestamp, true},
                     {"amount", pipeline::FieldType::decimal},
                     {"id", pipeline::FieldType::uuid},
                     {"customer.id", pipeline::FieldType::string}};
  auto sink = sinks::make_postgres_sink(options);
  sink->open();
  pipeline::Record r;
  r.hash = "V1:typed";
  r.message_id = "m1";
  r.document = nlohmann::ordered_json::parse(
      R"({"at":"2024-02-29T12:00:00.123Z","atMs":1709208000123,)"
      R"("amount":"12345678901234567.891","id":"0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d",)"
      R"("customer":{"id":"C-7"}})");
  EXPECT_EQ(sink->write(std::vector<pipeline::Record>{r}).outcomes,
            std::vector<sinks::WriteOutcome>{sinks::WriteOutcome::inserted});
  EXPECT_EQ(pg.query("SELECT \"at\" = \"atMs\", \"atMs\" = '2024-02-29T12:00:00.123Z', "
                     "amount = 12345678901234567.891, id::text, customer_id FROM " +
                     options.table),
            "t|t|t|0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d|C-7\n");
}

// Rows go to the server as arrays (binary for the hash, message id and document, array
// literals for typed columns): what an array literal would misread arrives as it was.
TEST(PostgresSink, ValuesThatAnArrayLiteralWouldMisreadArriveUnchanged) {
  auto& pg = test::Postgres::shared();
  sinks::PostgresOptions options;
  options.dsn = pg.dsn();
  options.table = "arrays_" + std::to_string(getpid());
  options.columns = {{"name", pipeline::FieldType::string},
                     {"n", pipeline::FieldType::integer},
                     {"tags", pipeline::FieldType::json}};
  auto sink = sinks::make_postgres_sink(options);
  sink->open();
  const std::vector<std::string> names = {
      "NULL", "", "a,b", "{x}", "q\"uote", "back\\slash", "  spaced  ", "ünï©ødé €", "line\nbreak"};
  std::vector<pipeline::Record> batch;
  for (std::size_t i = 0; i < names.size(); ++i) {
    pipeline::Record r;
    r.hash = "V1:array-" + std::to_string(i);
    r.message_id = i == 0 ? "" : "m\"" + std::to_string(i);
    r.document["name"] = names[i];
    r.document["n"] = static_cast<int>(i);
    r.document["tags"] = nlohmann::ordered_json::array({names[i], nullptr});
    batch.push_back(r);
  }
  batch.back().document.erase("n");  // a missing field: NULL in its column
  EXPECT_EQ(sink->write(batch).outcomes,
            std::vector<WriteOutcome>(names.size(), WriteOutcome::inserted));
  for (std::size_t i = 0; i < names.size(); ++i) {
    const std::string where =
        " FROM " + options.table + " WHERE hash = 'V1:array-" + std::to_string(i) + "'";
    // Compared inside the server: no quoting of psql's output in the way.
    EXPECT_EQ(pg.query("SELECT name = document->>'name', name IS NULL, tags = document->'tags', "
                       "message_id" +
                       where),
              std::string("t|f|t|") + (i == 0 ? "" : "m\"" + std::to_string(i)) + "\n")
        << names[i];
    EXPECT_EQ(pg.query("SELECT octet_length(name)" + where), std::to_string(names[i].size()) + "\n")
        << names[i];
  }
  EXPECT_EQ(
      pg.query("SELECT count(*)" + std::string(" FROM ") + options.table + " WHERE n IS NULL"),
      "1\n");
  EXPECT_EQ(pg.query("SELECT n FROM " + options.table + " WHERE hash = 'V1:array-3'"), "3\n");
}

// A table made before (by the user, or by an earlier configuration) whose typed columns
// have other types than the configuration says: the rows are cast to the table's own
// types, as a VALUES list's parameters were.
TEST(PostgresSink, TypedColumnsTakeTheExistingTablesTypes) {
  auto& pg = test::Postgres::shared();
  sinks::PostgresOptions options;
  options.dsn = pg.dsn();
  options.table = "own_types_" + std::to_string(getpid());
  pg.query("CREATE TABLE " + options.table +
           " (hash text NOT NULL, message_id text, document jsonb NOT NULL, written_at "
           "timestamptz NOT NULL DEFAULT now(), id uuid, n integer, at timestamp)");
  options.columns = {{"id", pipeline::FieldType::string},
                     {"n", pipeline::FieldType::string},
                     {"at", pipeline::FieldType::string}};
  auto sink = sinks::make_postgres_sink(options);
  sink->open();
  pipeline::Record r;
  r.hash = "V1:own";
  r.message_id = "m1";
  r.document = nlohmann::ordered_json::parse(
      R"({"id":"0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d","n":"42","at":"2024-01-01T00:00:00+05:00"})");
  EXPECT_EQ(sink->write(std::vector<pipeline::Record>{r}).outcomes,
            std::vector<sinks::WriteOutcome>{sinks::WriteOutcome::inserted});
  EXPECT_EQ(pg.query("SELECT id::text, n + 1, at FROM " + options.table),
            "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d|43|2024-01-01 00:00:00\n");
}

TEST(PostgresSink, LargeBatchesInOneStatementCountEachDuplicateOnce) {
  auto& pg = test::Postgres::shared();
  sinks::PostgresOptions options;
  options.dsn = pg.dsn();
  options.table = "pipelined_" + std::to_string(getpid());
  auto sink = sinks::make_postgres_sink(options);
  sink->open();
  std::vector<pipeline::Record> batch;
  for (int i = 0; i < 650; ++i)
    batch.push_back(record("SKU-" + std::to_string(i % 500), 1, "m" + std::to_string(i)));
  const auto outcomes = sink->write(batch).outcomes;
  ASSERT_EQ(outcomes.size(), 650u);
  for (int i = 0; i < 650; ++i)
    EXPECT_EQ(outcomes[i], i < 500 ? WriteOutcome::inserted : WriteOutcome::duplicate) << i;
  EXPECT_EQ(sink->count_records(), 500u);
  EXPECT_EQ(sink->write(batch).outcomes, std::vector<WriteOutcome>(650, WriteOutcome::duplicate))
      << "the connection is usable again";
}

TEST(PostgresSink, UnreachableDatabaseIsASinkError) {
  sinks::PostgresOptions options;
  options.dsn = "host=127.0.0.1 port=9 user=postgres";
  options.connect_timeout = std::chrono::seconds(2);
  auto sink = sinks::make_postgres_sink(options);
  EXPECT_THROW(sink->open(), sinks::SinkError);
}

TEST(MongoSink, IdFromHashMakesDuplicatesError11000) {
  sinks::MongoOptions options;
  options.uri = test::MongoWire::shared().uri();
  options.database = "sluice_test";
  options.collection = "records_" + std::to_string(getpid());
  options.id_from_hash = true;
  options.write_concern = "1";
  auto sink = sinks::make_mongo_sink(options);
  check_idempotent_batches(*sink);
}

// The indexes of a collection as the server lists them: name -> "KEY:unique".
std::map<std::string, std::string> mongo_indexes(const std::string& database,
                                                 const std::string& collection) {
  std::map<std::string, std::string> found;
  mongoc_client_t* client = mongoc_client_new(test::MongoWire::shared().uri().c_str());
  mongoc_collection_t* c =
      mongoc_client_get_collection(client, database.c_str(), collection.c_str());
  mongoc_cursor_t* cursor = mongoc_collection_find_indexes_with_opts(c, nullptr);
  const bson_t* index = nullptr;
  while (mongoc_cursor_next(cursor, &index)) {
    bson_iter_t it, key;
    std::string name, keys, unique = "false";
    if (bson_iter_init_find(&it, index, "name")) name = bson_iter_utf8(&it, nullptr);
    if (bson_iter_init_find(&it, index, "key") && bson_iter_recurse(&it, &key))
      while (bson_iter_next(&key)) keys += bson_iter_key(&key);
    if (bson_iter_init_find(&it, index, "unique") && bson_iter_as_bool(&it)) unique = "true";
    found[name] = keys + ":" + unique;
  }
  mongoc_cursor_destroy(cursor);
  mongoc_collection_destroy(c);
  mongoc_client_destroy(client);
  return found;
}

// The default identity is _id (every MongoDB-compatible server enforces its
// uniqueness); the separate unique index is an option, and opening the sink creates it.
// CongoDB lists the index but does not enforce it: the server's own uniqueness on the
// hash field is MongoDB's to prove, not this test's.
TEST(MongoSink, TheSeparateUniqueIndexOptionCreatesAUniqueIndexOnTheHash) {
  EXPECT_TRUE(sinks::MongoOptions{}.id_from_hash) << "_id is the default identity";
  sinks::MongoOptions options;
  options.uri = test::MongoWire::shared().uri();
  options.database = "sluice_test";
  options.collection = "indexed_" + std::to_string(getpid());
  options.id_from_hash = false;
  EXPECT_EQ(mongo_indexes(options.database, options.collection).count("uniq_content_hash"), 0u);
  auto sink = sinks::make_mongo_sink(options);
  sink->open();
  const auto indexes = mongo_indexes(options.database, options.collection);
  ASSERT_EQ(indexes.count("uniq_content_hash"), 1u);
  EXPECT_EQ(indexes.at("uniq_content_hash"), "documentHash:true");
  EXPECT_EQ(sink->write(std::vector<pipeline::Record>{record("A", 1, "m1"), record("B", 1, "m2")})
                .outcomes,
            (std::vector<WriteOutcome>{WriteOutcome::inserted, WriteOutcome::inserted}));
  EXPECT_EQ(sink->count_records(), 2u);
}

TEST(MongoSink, UnreachableServerIsASinkError) {
  sinks::MongoOptions options;
  options.uri = "mongodb://127.0.0.1:9/?directConnection=true&serverSelectionTimeoutMS=500";
  auto sink = sinks::make_mongo_sink(options);
  EXPECT_THROW(sink->open(), sinks::SinkError);
}

// A record whose message waits in an ordered group (SQS FIFO) is written at once: its
// group cannot move on until it is settled. Others wait for company (batch_timeout).
TEST(BatchWriter, AnOrderedRecordIsWrittenWithoutWaitingForTheBatchTimer) {
  const std::string path =
      ::testing::TempDir() + "/sluice-writer-" + std::to_string(getpid()) + ".db";
  test::remove_sqlite(path);
  sinks::SqliteOptions sqlite;
  sqlite.path = path;
  sinks::WriterOptions options;
  options.batch_size = 100;
  options.batch_timeout = std::chrono::seconds(20);
  sinks::BatchWriter writer([&] { return sinks::make_sqlite_sink(sqlite); }, options, {});
  writer.start();
  auto message = [](std::optional<std::string> group) {
    auto state = std::make_shared<detail::MessageState>();
    detail::MessageText::Builder text;
    if (group) text.group(*group);
    state->text = text.build();
    return detail::MessageAccess::wrap(state);
  };
  Message unordered = message(std::nullopt);
  writer.submit(record("U", 1, "u"), unordered);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // a chance to write it alone
  EXPECT_FALSE(unordered.settled()) << "a standard record waits for company";
  Message ordered = message("g1");
  writer.submit(record("O", 1, "o"), ordered);
  EXPECT_TRUE(test::wait_until([&] { return ordered.settled(); }, std::chrono::seconds(5)))
      << "an ordered record did not wait for the 20 s batch timer";
  EXPECT_TRUE(unordered.settled()) << "and what was queued went with it";
  writer.stop();
  test::remove_sqlite(path);
}

// ---------------------------------------------------------------- refused records
// A record the database refuses for good must not hold back its batch-mates: the
// writer splits the batch down to the refused records, writes the rest, and rejects
// those with reason sink_refused and the database's own words. Before per-record
// isolation the whole batch was retried and nacked, forever.
namespace {

struct IsolationRun {
  std::map<detail::Outcome, int> outcomes;
  int refused_events = 0, inserted_events = 0, batch_failures = 0;
};

IsolationRun write_with_poison(const sinks::BatchWriter::SinkFactory& factory,
                               std::vector<pipeline::Record> poison) {
  sinks::WriterOptions options;
  options.batch_size = 500;  // one batch: the poison shares it with 40 good records
  options.batch_timeout = std::chrono::milliseconds(200);
  options.retry_base = std::chrono::milliseconds(10);
  IsolationRun run;
  std::mutex mutex;
  sinks::WriterEvents events;
  events.outcome = [&](WriteOutcome o, const Message&) {
    std::lock_guard lock(mutex);
    run.refused_events += o == WriteOutcome::refused;
    run.inserted_events += o == WriteOutcome::inserted;
  };
  events.batch_failed = [&](const std::string&) {
    std::lock_guard lock(mutex);
    ++run.batch_failures;
  };
  sinks::BatchWriter writer(factory, options, events);
  writer.start();
  std::vector<pipeline::Record> records;
  for (int i = 0; i < 40; ++i)
    records.push_back(record("GOOD-" + std::to_string(i), i, "g" + std::to_string(i)));
  // The poison in the middle and at both ends of the batch.
  records.insert(records.begin() + 20, poison[0]);
  for (std::size_t i = 1; i < poison.size(); ++i)
    records.insert(i % 2 ? records.begin() : records.end(), poison[i]);
  std::vector<std::shared_ptr<detail::MessageState>> states;
  std::vector<sinks::BatchWriter::Item> items;
  for (auto& r : records) {
    auto state = std::make_shared<detail::MessageState>();
    state->text = detail::MessageText::Builder().id(r.message_id).build();
    // p2's body is not UTF-8 (SQS would not allow it, another source might).
    state->body = r.message_id == "p2" ? std::string("\xff\xfe not UTF-8") : r.document.dump();
    states.push_back(state);
    items.push_back({std::move(r), detail::MessageAccess::wrap(state)});
  }
  writer.submit_all(std::move(items));
  EXPECT_TRUE(test::wait_until(
      [&] {
        return std::all_of(states.begin(), states.end(), [](auto& s) { return s->settled(); });
      },
      std::chrono::seconds(30)))
      << "every message settled";
  writer.stop();
  for (auto& s : states) ++run.outcomes[s->outcome.load()];
  return run;
}

pipeline::Record poison_record(const std::string& id, nlohmann::json document) {
  pipeline::Record r = record("POISON-" + id, 0, id);
  r.hash = pipeline::content_hash("V1", {"POISON-" + id, 0});
  r.document = std::move(document);
  return r;
}

}  // namespace

TEST(BatchWriter, RecordsSqliteRefusesAreRejectedAndTheirBatchMatesWritten) {
  const std::string path =
      ::testing::TempDir() + "/sluice-refused-" + std::to_string(getpid()) + ".db";
  test::remove_sqlite(path);
  sinks::SqliteOptions sqlite;
  sqlite.path = path;
  {
    // The table as a user may have it: a CHECK and a trigger that refuse some rows.
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db,
                           "CREATE TABLE records (hash TEXT NOT NULL, message_id TEXT, document "
                           "TEXT NOT NULL CHECK (length(document) < 2000), written_at TEXT);"
                           "CREATE TRIGGER refuse BEFORE INSERT ON records WHEN NEW.document LIKE "
                           "'%forbidden%' BEGIN SELECT RAISE(ABORT, 'forbidden record'); END;",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(db);
  }
  const auto run = write_with_poison([&] { return sinks::make_sqlite_sink(sqlite); },
                                     {poison_record("p1", {{"skuId", "forbidden"}}),
                                      poison_record("p2", {{"skuId", std::string(3000, 'x')}})});
  EXPECT_EQ(run.refused_events, 2);
  EXPECT_EQ(run.inserted_events, 40);
  EXPECT_EQ(run.outcomes.at(detail::Outcome::ack), 42) << "written, or kept in the rejects table";
  EXPECT_EQ(run.batch_failures, 0) << "a refusal is not a failure to retry";
  auto sink = sinks::make_sqlite_sink(sqlite);
  EXPECT_EQ(sink->count_records(), 40u);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  std::vector<std::string> details;
  sqlite3_exec(
      db, "SELECT reason || ' ' || detail FROM rejects ORDER BY message_id",
      [](void* out, int, char** values, char**) {
        static_cast<std::vector<std::string>*>(out)->push_back(values[0]);
        return 0;
      },
      &details, nullptr);
  sqlite3_close(db);
  ASSERT_EQ(details.size(), 2u);
  EXPECT_NE(details[0].find("sink_refused"), std::string::npos) << details[0];
  EXPECT_NE(details[0].find("forbidden record"), std::string::npos) << details[0];
  EXPECT_NE(details[1].find("CHECK constraint failed"), std::string::npos) << details[1];
  test::remove_sqlite(path);
}

TEST(BatchWriter, RecordsPostgresRefusesAreRejectedAndTheirBatchMatesWritten) {
  auto& pg = test::Postgres::shared();
  sinks::PostgresOptions options;
  options.dsn = pg.dsn();
  options.table = "refused_" + std::to_string(getpid());
  options.rejects_table = "refused_rejects_" + std::to_string(getpid());
  options.columns = {{"quantity", pipeline::FieldType::integer}};
  // jsonb refuses \u0000; a bigint column refuses "many"; invalid UTF-8 in the body of
  // the reject row itself is stored escaped.
  auto nul = poison_record("p1", {{"skuId", std::string("A\0B", 3)}, {"quantity", 1}});
  auto text = poison_record("p2", {{"skuId", "B"}, {"quantity", "many"}});
  const auto run =
      write_with_poison([&] { return sinks::make_postgres_sink(options); }, {nul, text});
  EXPECT_EQ(run.refused_events, 2);
  EXPECT_EQ(run.inserted_events, 40);
  EXPECT_EQ(run.outcomes.at(detail::Outcome::ack), 42);
  EXPECT_EQ(run.batch_failures, 0);
  EXPECT_EQ(pg.query("SELECT count(*) FROM " + options.table), "40\n");
  const std::string rejects = pg.query("SELECT message_id || ' ' || reason || ' ' || detail FROM " +
                                       options.rejects_table + " ORDER BY message_id");
  EXPECT_NE(rejects.find("p1 sink_refused"), std::string::npos) << rejects;
  EXPECT_NE(rejects.find("\\u0000"), std::string::npos) << rejects;
  EXPECT_NE(rejects.find("p2 sink_refused"), std::string::npos) << rejects;
  EXPECT_NE(rejects.find("invalid input syntax for type bigint"), std::string::npos) << rejects;
  EXPECT_NE(rejects.find("body stored escaped"), std::string::npos) << rejects;
  EXPECT_EQ(pg.query("SELECT body FROM " + options.rejects_table + " WHERE message_id = 'p2'"),
            "\\xff\\xfe not UTF-8\n");
}

TEST(BatchWriter, RecordsMongoRefusesAreRejectedAndTheirBatchMatesWritten) {
  sinks::MongoOptions options;
  options.uri = test::MongoWire::shared().uri();
  options.database = "sluice_test";
  options.collection = "refused_" + std::to_string(getpid());
  options.rejects_collection = "refused_rejects_" + std::to_string(getpid());
  options.id_from_hash = true;
  options.write_concern = "1";
  // A key BSON cannot hold (an embedded NUL) is refused before the server sees it.
  const auto run = write_with_poison([&] { return sinks::make_mongo_sink(options); },
                                     {poison_record("p1", {{std::string("sku\0Id", 6), "A"}})});
  EXPECT_EQ(run.refused_events, 1);
  EXPECT_EQ(run.inserted_events, 40);
  EXPECT_EQ(run.outcomes.at(detail::Outcome::ack), 41);
  EXPECT_EQ(sinks::make_mongo_sink(options)->count_records(), 40u);
}

TEST(MongoSink, UnacknowledgedWritesAreRefused) {
  sinks::MongoOptions options;
  options.uri = test::MongoWire::shared().uri();
  options.write_concern = "0";
  auto sink = sinks::make_mongo_sink(options);
  try {
    sink->open();
    FAIL() << "w: 0 accepted";
  } catch (const sinks::SinkError& e) {
    EXPECT_NE(std::string(e.what()).find("at least 1"), std::string::npos) << e.what();
  }
}

// A record the database fails on its own, with an error not known to be permanent
// (a MongoDB code outside the list, say), is retried; once its message has come back
// sink.max_record_failures times it is refused instead of coming back forever.
TEST(BatchWriter, ARecordFailingOnItsOwnIsRefusedAfterMaxRecordFailuresDeliveries) {
  // A stand-in database for the writer's logic: it fails every record of "poison".
  class FailingSink final : public sinks::Sink {
   public:
    void open() override {}
    sinks::WriteResult write(std::span<const pipeline::Record> records) override {
      sinks::WriteResult result;
      for (std::size_t i = 0; i < records.size(); ++i) {
        const bool poison = records[i].message_id == "poison";
        result.outcomes.push_back(poison ? WriteOutcome::failed : WriteOutcome::inserted);
        if (poison) result.reasons.emplace_back(i, "error 9999: unknown to us");
      }
      return result;
    }
    void write_rejects(std::span<const sinks::RejectRow> rows) override {
      for (const auto& r : rows) rejects.push_back(r);
    }
    std::vector<sinks::StoredReject> read_rejects(const sinks::RejectQuery&) override { return {}; }
    void mark_replayed(std::span<const std::string>) override {}
    std::uint64_t count_records() override { return 0; }
    std::optional<std::string> load_position(const std::string&) override { return {}; }
    void save_position(const std::string&, const std::string&) override {}
    std::string describe() const override { return "failing"; }
    std::vector<sinks::RejectRow> rejects;
  };
  FailingSink* sink = nullptr;
  sinks::WriterOptions options;
  options.max_record_failures = 3;
  options.batch_timeout = std::chrono::milliseconds(1);
  sinks::BatchWriter writer(
      [&] {
        auto s = std::make_unique<FailingSink>();
        sink = s.get();
        return s;
      },
      options, {});
  writer.start();
  auto deliver = [&](int receive_count) {
    auto state = std::make_shared<detail::MessageState>();
    state->text = detail::MessageText::Builder().id("poison").build();
    state->receive_count = receive_count;
    writer.submit(record("P", 1, "poison"), detail::MessageAccess::wrap(state));
    EXPECT_TRUE(test::wait_until([&] { return state->settled(); }, std::chrono::seconds(5)));
    return state->outcome.load();
  };
  EXPECT_EQ(deliver(1), detail::Outcome::retry) << "first deliveries: nacked, to come back";
  EXPECT_EQ(deliver(2), detail::Outcome::retry);
  EXPECT_EQ(deliver(3), detail::Outcome::ack) << "the third: kept as a reject, acked";
  writer.stop();
  ASSERT_EQ(sink->rejects.size(), 1u);
  EXPECT_EQ(sink->rejects[0].reason, "sink_refused");
  EXPECT_NE(sink->rejects[0].detail.find("failed on 3 deliveries: error 9999"), std::string::npos)
      << sink->rejects[0].detail;
}

// libpq quotes a connection string it cannot read, password and all: the sink's error
// (shown by logs, `sluice ctl status` and the run's summary) never carries it.
TEST(PostgresSink, AnUnreadableDsnsErrorDoesNotCarryItsPassword) {
  sinks::PostgresOptions options;
  options.dsn = "postgresql://postgres:Top%zzSecretPW2@127.0.0.1:1/db";
  auto sink = sinks::make_postgres_sink(options);
  try {
    sink->open();
    ADD_FAILURE() << "opened";
  } catch (const sinks::SinkError& e) {
    EXPECT_EQ(std::string(e.what()).find("SecretPW2"), std::string::npos) << e.what();
  }
}
