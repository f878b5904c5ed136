// The sinks against real databases: SQLite (a file), PostgreSQL 15 (a private
// cluster) and CongoDB (a MongoDB-wire server; it does not enforce unique
// secondary indexes, so with it only the _id-from-hash identity can be proven).
#include <gtest/gtest.h>

#include <filesystem>

#include "pipeline/transform.hpp"
#include "runtime/message_state.hpp"
#include "sinks/sink.hpp"
#include "sinks/writer.hpp"
#include "support/emulator.hpp"
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
  EXPECT_EQ(sink.write(first),
            (std::vector<WriteOutcome>{WriteOutcome::inserted, WriteOutcome::inserted,
                                       WriteOutcome::duplicate}));
  const std::vector<pipeline::Record> second{record("B", 2, "m4"), record("C", 3, "m5")};
  EXPECT_EQ(sink.write(second),
            (std::vector<WriteOutcome>{WriteOutcome::duplicate, WriteOutcome::inserted}));
  EXPECT_EQ(sink.count_records(), 3u);
  sink.write_rejects(std::vector<sinks::RejectRow>{{"m9", "malformed", "not JSON", "{oops", "q"}});
}

}  // namespace

TEST(SqliteSink, InsertFirstUnderAUniqueIndex) {
  const std::string path =
      ::testing::TempDir() + "/sluice-sink-" + std::to_string(getpid()) + ".db";
  std::filesystem::remove(path);
  sinks::SqliteOptions options;
  options.path = path;
  auto sink = sinks::make_sqlite_sink(options);
  check_idempotent_batches(*sink);
  // A second connection (another process, say) sees the same records and index.
  auto other = sinks::make_sqlite_sink(options);
  other->open();
  EXPECT_EQ(other->write(std::vector<pipeline::Record>{record("C", 3, "x")}),
            std::vector<WriteOutcome>{WriteOutcome::duplicate});
  std::filesystem::remove(path);
}

TEST(SqliteSink, UnwritableFileIsASinkError) {
  sinks::SqliteOptions options;
  options.path = "/proc/sluice-cannot-write-here.db";
  auto sink = sinks::make_sqlite_sink(options);
  EXPECT_THROW(sink->open(), sinks::SinkError);
}

TEST(PostgresSink, MultiRowInsertOnConflictDoNothing) {
  auto& pg = test::Postgres::shared();
  sinks::PostgresOptions options;
  options.dsn = pg.dsn();
  options.table = "records_" + std::to_string(getpid());
  options.columns = {{"skuId", pipeline::FieldType::string},
                     {"quantity", pipeline::FieldType::integer}};
  auto sink = sinks::make_postgres_sink(options);
  check_idempotent_batches(*sink);
  EXPECT_EQ(pg.query("SELECT count(*) FROM " + options.table +
                     " WHERE \\\"skuId\\\" = 'A' AND quantity = 1"),
            "1\n");
  EXPECT_EQ(pg.query("SELECT document->>'skuId' FROM " + options.table + " WHERE quantity = 3"),
            "C\n");
  EXPECT_EQ(pg.query("SELECT indexdef LIKE '%UNIQUE%' FROM pg_indexes WHERE tablename = '" +
                     options.table + "'"),
            "t\n");
}

TEST(PostgresSink, LargeBatchesArePipelinedInOneRoundTrip) {
  auto& pg = test::Postgres::shared();
  sinks::PostgresOptions options;
  options.dsn = pg.dsn();
  options.table = "pipelined_" + std::to_string(getpid());
  auto sink = sinks::make_postgres_sink(options);
  sink->open();
  std::vector<pipeline::Record> batch;
  for (int i = 0; i < 650; ++i)
    batch.push_back(record("SKU-" + std::to_string(i % 500), 1, "m" + std::to_string(i)));
  const auto outcomes = sink->write(batch);
  ASSERT_EQ(outcomes.size(), 650u);
  for (int i = 0; i < 650; ++i)
    EXPECT_EQ(outcomes[i], i < 500 ? WriteOutcome::inserted : WriteOutcome::duplicate) << i;
  EXPECT_EQ(sink->count_records(), 500u);
  EXPECT_EQ(sink->write(batch), std::vector<WriteOutcome>(650, WriteOutcome::duplicate))
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

TEST(MongoSink, SeparateUniqueIndexIsCreated) {
  // CongoDB accepts the index but does not enforce it: this proves the driver calls
  // (createIndexes, unordered insert_many, majority write concern), not MongoDB's
  // index behaviour.
  sinks::MongoOptions options;
  options.uri = test::MongoWire::shared().uri();
  options.database = "sluice_test";
  options.collection = "indexed_" + std::to_string(getpid());
  auto sink = sinks::make_mongo_sink(options);
  sink->open();
  EXPECT_EQ(sink->write(std::vector<pipeline::Record>{record("A", 1, "m1"), record("B", 1, "m2")}),
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
  std::filesystem::remove(path);
  sinks::SqliteOptions sqlite;
  sqlite.path = path;
  sinks::WriterOptions options;
  options.batch_size = 100;
  options.batch_timeout = std::chrono::seconds(20);
  sinks::BatchWriter writer([&] { return sinks::make_sqlite_sink(sqlite); }, options, {});
  writer.start();
  auto message = [](std::optional<std::string> group) {
    auto state = std::make_shared<detail::MessageState>();
    state->group_id = std::move(group);
    return detail::MessageAccess::wrap(state);
  };
  Message unordered = message(std::nullopt);
  writer.submit(record("U", 1, "u"), unordered);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_FALSE(unordered.settled()) << "a standard record waits for company";
  Message ordered = message("g1");
  writer.submit(record("O", 1, "o"), ordered);
  EXPECT_TRUE(test::wait_until([&] { return ordered.settled(); }, std::chrono::seconds(5)))
      << "an ordered record did not wait for the 20 s batch timer";
  EXPECT_TRUE(unordered.settled()) << "and what was queued went with it";
  writer.stop();
  std::filesystem::remove(path);
}
