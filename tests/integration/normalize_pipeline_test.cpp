// examples/orders-pipeline.yaml end to end on the real servers: an order-events stream
// where a fifth of the events are business duplicates written differently (the other
// payload version, another offset or epoch milliseconds, other trailing zeros, other
// case and spaces, the id in capitals or braces) lands as exactly the distinct business
// records, in SQLite and in PostgreSQL's typed columns.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "cli/publish.hpp"
#include "config/config.hpp"
#include "sluice/driver/sink.hpp"
#include "support/pipeline.hpp"
#include "support/process.hpp"

using namespace sluice;

namespace {

std::string example_text() {
  std::ifstream in(std::string(SLUICE_SOURCE_DIR) + "/examples/orders-pipeline.yaml");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void replace(std::string& text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  ASSERT_NE(at, std::string::npos) << from;
  text.replace(at, from.size(), to);
}

class NormalizePipeline : public test::PipelineFixture {
 protected:
  void TearDown() override {
    unsetenv("SLUICE_QUEUE_URL");
    unsetenv("SLUICE_SQS_ENDPOINT");
    unsetenv("SLUICE_REGION");
  }
  // The example's text, pointed at a fresh queue holding `events`, published with the
  // tenant attribute written as producers do (case and spaces).
  std::string prepare(const std::string& prefix, const app::GeneratedEvents& events) {
    const std::string url = make_queue(prefix);
    std::vector<sqs::SendMessageEntry> entries;
    for (std::size_t i = 0; i < events.bodies.size(); ++i) {
      sqs::SendMessageEntry e;
      e.body = events.bodies[i];
      e.message_attributes["tenant"] =
          sqs::MessageAttributeValue::string(i % 2 ? " ACME " : "acme");
      entries.push_back(std::move(e));
    }
    sqs::Publisher publisher(client_, url);
    for (const auto& o : test::run(io_, publisher.send_batch(std::move(entries))))
      EXPECT_TRUE(o.ok) << o.error_message;
    setenv("SLUICE_QUEUE_URL", url.c_str(), 1);
    setenv("SLUICE_SQS_ENDPOINT", test::Emulator::shared().endpoint().c_str(), 1);
    setenv("SLUICE_REGION", "us-east-1", 1);
    queue_url_ = url;
    std::string yaml = example_text();
    replace(yaml, "poll_wait: 20s", "poll_wait: 1s");
    replace(yaml, "listen: 127.0.0.1:9464", "listen: 127.0.0.1:0");
    replace(yaml, "level: info", "level: warn");
    return yaml;
  }
  void expect_summary(const app::RunSummary& summary, const app::GeneratedEvents& events) {
    EXPECT_EQ(summary.records_in_sink, events.distinct_records);
    EXPECT_EQ(summary.written, events.distinct_records);
    EXPECT_EQ(summary.received, events.bodies.size());
    EXPECT_EQ(summary.duplicates,
              events.bodies.size() - events.distinct_records - events.malformed);
    EXPECT_EQ(
        summary.rejected_malformed + summary.rejected_validation + summary.rejected_schema_drift,
        events.malformed);
    // The broken events: not JSON; no order id and a status outside the enum
    // (validation); an amount that is no number and an unknown version (schema drift).
    EXPECT_GT(summary.rejected_malformed, 0u);
    EXPECT_GT(summary.rejected_validation, 0u);
    EXPECT_GT(summary.rejected_schema_drift, 0u);
    EXPECT_EQ(queue_total(queue_url_), 0);
  }
  std::string queue_url_;
};

}  // namespace

TEST_F(NormalizePipeline, OrderEventsIntoSqliteHoldExactlyTheDistinctBusinessRecords) {
  const auto events = app::generate_order_events(3000, 0.2, 0.01, 11);
  ASSERT_LT(events.distinct_records, 3000u - 400u) << "the stream holds business duplicates";
  std::string yaml = prepare("orders-sqlite", events);
  const std::string db =
      ::testing::TempDir() + "/sluice-orders-" + std::to_string(getpid()) + ".db";
  test::remove_sqlite(db);
  replace(yaml, "path: orders.db", "path: " + db);
  const auto summary = run_until_drained(app::parse_config(yaml));
  expect_summary(summary, events);

  // The stored documents: one canonical spelling of each value.
  sqlite3* handle = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &handle), SQLITE_OK);
  sqlite3_stmt* statement = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(handle, "SELECT document FROM records", -1, &statement, nullptr),
            SQLITE_OK);
  std::size_t rows = 0;
  std::set<std::string> business;
  while (sqlite3_step(statement) == SQLITE_ROW) {
    ++rows;
    const auto doc =
        nlohmann::json::parse(reinterpret_cast<const char*>(sqlite3_column_text(statement, 0)));
    EXPECT_EQ(doc["tenant"], "acme");
    const std::string placed = doc["placedAt"];
    EXPECT_EQ(placed.size(), 24u) << placed;  // 2024-02-29T12:00:00.000Z
    EXPECT_EQ(placed.back(), 'Z') << placed;
    const std::string amount = doc["amount"];
    EXPECT_EQ(amount.size() - amount.find('.'), 3u) << amount << ": scale 2";
    EXPECT_TRUE(doc["customer"]["id"].is_string()) << doc.dump();
    const std::string order = doc["orderId"];
    EXPECT_EQ(order.size(), 36u);
    EXPECT_EQ(order.find_first_of("ABCDEF{}"), std::string::npos) << order;
    business.insert(doc.value("orderId", "") + doc["status"].get<std::string>() + amount +
                    doc["currency"].get<std::string>() + placed);
  }
  sqlite3_finalize(statement);
  sqlite3_close(handle);
  EXPECT_EQ(rows, events.distinct_records);
  EXPECT_EQ(business.size(), rows) << "two rows hold one business record";
  test::remove_sqlite(db);
}

TEST_F(NormalizePipeline, OrderEventsIntoPostgresFillTypedColumns) {
  auto& pg = test::Postgres::shared();
  const auto events = app::generate_order_events(2000, 0.2, 0.01, 12);
  std::string yaml = prepare("orders-pg", events);
  const std::string table = "orders_" + std::to_string(getpid());
  replace(yaml, "  type: sqlite\n", "  type: postgres\n  table: " + table + "\n");
  // The example's SQLite file is not this pipeline's; its typed columns are.
  replace(yaml, "  sqlite:\n    path: orders.db\n", "");
  replace(yaml,
          "  # postgres:\n  #   columns:", "  postgres:\n    dsn: " + pg.dsn() + "\n    columns:");
  const auto summary = run_until_drained(app::parse_config(yaml));
  expect_summary(summary, events);
  EXPECT_EQ(pg.query("SELECT count(*), count(DISTINCT (\"orderId\", status, amount, currency, "
                     "\"placedAt\", customer_id)) FROM " +
                     table),
            std::to_string(events.distinct_records) + "|" +
                std::to_string(events.distinct_records) + "\n");
  EXPECT_EQ(pg.query("SELECT DISTINCT pg_typeof(\"placedAt\"), pg_typeof(amount), "
                     "pg_typeof(\"orderId\"), pg_typeof(customer_id) FROM " +
                     table),
            "timestamp with time zone|numeric|uuid|text\n");
  // The columns hold the documents' values: the instant and the exact amount.
  EXPECT_EQ(pg.query("SELECT count(*) FROM " + table +
                     " WHERE \"placedAt\" <> (document->>'placedAt')::timestamptz"
                     " OR amount <> (document->>'amount')::numeric"
                     " OR scale(amount) <> 2"
                     " OR customer_id <> document->'customer'->>'id'"),
            "0\n");
  EXPECT_EQ(pg.query("SELECT count(*) FROM " + table +
                     " WHERE \"placedAt\" < '2024-02-28T00:00:00Z' OR \"placedAt\" >= "
                     "'2024-03-02T00:00:00Z'"),
            "0\n")
      << "every instant read in its own offset lands in the generated three days";
}

// --header has no SNS form here: refused with exit code 2, never dropped.
TEST(NormalizePipelinePublish, HeaderWithATopicIsRefused) {
  const std::string out = test::run_command(
      std::string(SLUICE_BINARY) +
      " publish --topic-arn arn:aws:sns:us-east-1:000000000000:t --header tenant=acme "
      "--generate 1 --endpoint-url http://127.0.0.1:1 2>&1; echo exit=$?");
  EXPECT_NE(out.find("--header: only with --queue-url"), std::string::npos) << out;
  EXPECT_NE(out.find("exit=2"), std::string::npos) << out;
}
