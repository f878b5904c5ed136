// Day-two features end to end against the SQS emulator and SQLite: filters (the
// filtered, the stored and the rejected add up to what was sent) and idempotency keys
// chosen by the producer (two bodies with one producer id are one record; a message
// without the id is rejected, never stored under its content).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <regex>
#include <set>
#include <thread>

#include "amqp/connection.hpp"
#include "app/run.hpp"
#include "cli/publish.hpp"
#include "config/config.hpp"
#include "sinks/sqlite/driver.hpp"
#include "support/pipeline.hpp"
#include "support/postgres_number.hpp"
#include "support/process.hpp"
#include "support/rabbitmq.hpp"
#include "support/wait.hpp"
#include "support/work.hpp"

using namespace sluice;

namespace {

class OperationsPipeline : public test::PipelineFixture {
 protected:
  void TearDown() override {
    if (!db_.empty()) test::remove_sqlite(db_);
  }
  // `sluice queue create --name QUEUE FLAGS` on the shared broker, then COUNT events
  // {"id":"PREFIX-i","seq":i} published to it by `sluice publish`.
  static void create_and_publish(const std::string& queue, const std::string& flags, int count,
                                 const std::string& prefix) {
    const std::string bin = SLUICE_BINARY,
                      url = " --amqp-url '" + test::RabbitMq::shared().uri() + "'";
    test::run_command(bin + " queue create" + url + " --name " + queue + " " + flags + " 2>&1");
    const std::string lines = ::testing::TempDir() + "/" + queue + ".jsonl";
    {
      std::ofstream out(lines);
      for (int i = 0; i < count; ++i)
        out << R"({"id":")" << prefix << "-" << i << R"(","seq":)" << i << "}\n";
    }
    test::run_command(bin + " publish" + url + " --routing-key " + queue + " --file " + lines +
                      " 2>&1");
    std::filesystem::remove(lines);
  }
  void send(const std::string& url,
            const std::vector<std::pair<std::string, std::map<std::string, std::string>>>& msgs) {
    std::vector<sqs::SendMessageEntry> entries;
    for (const auto& [body, attributes] : msgs) {
      sqs::SendMessageEntry e;
      e.body = body;
      for (const auto& [name, value] : attributes)
        e.message_attributes[name] = sqs::MessageAttributeValue::string(value);
      entries.push_back(std::move(e));
    }
    sqs::Publisher publisher(client_, url);
    for (const auto& o : test::run(io_, publisher.send_batch(std::move(entries))))
      EXPECT_TRUE(o.ok) << o.error_message;
  }
  // A pipeline on `url` into a fresh SQLite file, with `extra` YAML appended.
  app::PipelineConfig config(const std::string& url, const std::string& extra,
                             const std::string& identity = "[id]") {
    db_ = ::testing::TempDir() + "/sluice-ops-" + std::to_string(getpid()) + "-" +
          std::to_string(++files_) + ".db";
    test::remove_sqlite(db_);
    return app::parse_config(yaml_of(url, extra, identity));
  }
  // The YAML of config(), on the current db_.
  std::string yaml_of(const std::string& url, const std::string& extra,
                      const std::string& identity = "[id]") {
    return "source:\n  sqs:\n    queue_url: " + url +
           "\n    endpoint_url: " + test::Emulator::shared().endpoint() +
           "\n    region: us-east-1\n    poll_wait: 1s\n"
           "sink:\n  type: sqlite\n  sqlite:\n    path: " +
           db_ +
           "\nmetrics:\n  listen: 127.0.0.1:0\nlogging:\n  level: warn\n"
           "normalize:\n  fields:\n"
           "    - {name: id, from: /id, type: string, required: true}\n"
           "    - {name: type, from: /type, type: string}\n"
           "identity:\n  versions:\n    V1: " +
           identity + "\n" + extra;
  }
  std::vector<std::string> stored(const std::string& column_sql,
                                  const std::string& table = "records") {
    sqlite3* handle = nullptr;
    EXPECT_EQ(sqlite3_open(db_.c_str(), &handle), SQLITE_OK);
    sqlite3_stmt* statement = nullptr;
    std::vector<std::string> out;
    const std::string sql = "SELECT " + column_sql + " FROM " + table + " ORDER BY 1";
    EXPECT_EQ(sqlite3_prepare_v2(handle, sql.c_str(), -1, &statement, nullptr), SQLITE_OK);
    while (sqlite3_step(statement) == SQLITE_ROW)
      out.emplace_back(reinterpret_cast<const char*>(sqlite3_column_text(statement, 0)));
    sqlite3_finalize(statement);
    sqlite3_close(handle);
    return out;
  }
  std::string db_;
  int files_ = 0;
};

pid_t spawn_sluice(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {SLUICE_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  return test::spawn_quiet(argv);
}

using test::wait_exit;

// `sluice ctl ...` with SLUICE_ADMIN_TOKEN=token: exit code and output.
std::pair<int, std::string> ctl(const std::string& args, const std::string& token) {
  return test::run_with_status("SLUICE_ADMIN_TOKEN='" + token + "' " + SLUICE_BINARY + " ctl " +
                               args + " 2>&1");
}

// The figure `name` of `sluice ctl status` output ("received=120").
long figure(const std::string& status, const std::string& name) {
  const auto at = status.find(name + "=");
  if (at == std::string::npos) return -1;
  return std::stol(status.substr(at + name.size() + 1));
}

}  // namespace

TEST_F(OperationsPipeline, FilteredStoredAndRejectedAddUpToWhatWasSent) {
  const std::string url = make_queue("ops-filter");
  std::vector<std::pair<std::string, std::map<std::string, std::string>>> msgs;
  int expected_stored = 0, expected_filtered = 0, expected_rejected = 0;
  for (int i = 0; i < 300; ++i) {
    const std::string id = "e-" + std::to_string(i);
    switch (i % 6) {
      case 0:  // stored: an order of acme's
      case 1:
        msgs.push_back(
            {R"({"id":")" + id + R"(","type":"OrderPlaced","total":)" + std::to_string(i) + "}",
             {{"tenant", "acme-eu"}}});
        ++expected_stored;
        break;
      case 2:  // filtered: another tenant
        msgs.push_back(
            {R"({"id":")" + id + R"(","type":"OrderPlaced","total":5})", {{"tenant", "globex"}}});
        ++expected_filtered;
        break;
      case 3:  // filtered: a test event (anything-but prefix)
        msgs.push_back({R"({"id":")" + id + R"(","type":"TestPing"})", {{"tenant", "acme"}}});
        ++expected_filtered;
        break;
      case 4:  // stored by the second pattern: a cancellation with any tenant
        msgs.push_back({R"({"id":")" + id + R"(","type":"OrderCancelled"})", {}});
        ++expected_stored;
        break;
      case 5:  // malformed: rejected with its reason, never filtered
        msgs.push_back({R"({"id":")" + id + R"(","type":)", {{"tenant", "globex"}}});
        ++expected_rejected;
        break;
    }
  }
  send(url, msgs);
  const auto summary = run_until_drained(config(url, R"(filter:
  - body:
      type: [{anything-but: {prefix: Test}}]
      total: [{numeric: [">=", 0]}]
    attributes:
      tenant: [{prefix: acme}]
  - body:
      type: [OrderCancelled]
)"));
  EXPECT_EQ(summary.received, msgs.size());
  EXPECT_EQ(summary.filtered, static_cast<std::uint64_t>(expected_filtered));
  EXPECT_EQ(summary.written, static_cast<std::uint64_t>(expected_stored));
  EXPECT_EQ(summary.rejected_malformed, static_cast<std::uint64_t>(expected_rejected));
  EXPECT_EQ(summary.filtered + summary.written + summary.rejected_malformed, msgs.size());
  EXPECT_EQ(summary.records_in_sink, static_cast<std::uint64_t>(expected_stored));
  for (const auto& type : stored("json_extract(document, '$.type')"))
    EXPECT_TRUE(type == "OrderPlaced" || type == "OrderCancelled") << type;
  EXPECT_EQ(queue_total(url), 0) << "filtered messages are acked";
}

// route: each record in the table its type names, an unlisted type rejected with it
// (route.unknown: reject), and a redelivered copy a duplicate in its own table.
TEST_F(OperationsPipeline, RouteWritesEachRecordToTheTableItsTypeNames) {
  const std::string url = make_queue("ops-route");
  std::vector<std::pair<std::string, std::map<std::string, std::string>>> msgs;
  for (int i = 0; i < 90; ++i) {
    const char* type = i % 3 == 0 ? "OrderPlaced" : i % 3 == 1 ? "OrderCancelled" : "Refund";
    msgs.push_back({R"({"id":"o-)" + std::to_string(i) + R"(","type":")" + type + "\"}", {}});
  }
  msgs.push_back(msgs.front());  // the same record again: a duplicate in orders_placed
  send(url, msgs);
  const auto summary = run_until_drained(config(url, R"(route:
  field: type
  tables: {OrderPlaced: orders_placed, OrderCancelled: orders_cancelled}
  unknown: reject
)",
                                                "[id, type]"));
  EXPECT_EQ(summary.written, 60u);
  EXPECT_EQ(summary.duplicates, 1u);
  EXPECT_EQ(summary.rejected_validation, 30u) << "Refund names no table";
  EXPECT_EQ(summary.records_in_sink, 60u) << "the tables' records together";
  const auto placed = stored("json_extract(document, '$.type')", "orders_placed");
  const auto cancelled = stored("json_extract(document, '$.type')", "orders_cancelled");
  EXPECT_EQ(placed, std::vector<std::string>(30, "OrderPlaced"));
  EXPECT_EQ(cancelled, std::vector<std::string>(30, "OrderCancelled"));
  EXPECT_TRUE(stored("hash").empty()) << "nothing in sink.table: every value listed or rejected";
  const auto reasons = stored("detail", "rejects");
  ASSERT_EQ(reasons.size(), 30u);
  EXPECT_NE(reasons.front().find("route: type is \"Refund\""), std::string::npos)
      << reasons.front();
  EXPECT_EQ(queue_total(url), 0);
}

// sluice rejects: what a configuration rejected is listed, exported as JSON lines and,
// after the fix, replayed through the new configuration: exactly the distinct records
// stored, the copies found duplicates, what still fails left for another replay. The
// fix filters on a message attribute: the rows keep their messages' attributes.
TEST_F(OperationsPipeline, RejectsAreListedExportedAndReplayedAfterAFix) {
  const std::string url = make_queue("ops-rejects");
  std::vector<std::pair<std::string, std::map<std::string, std::string>>> msgs;
  for (int i = 0; i < 120; ++i)
    msgs.push_back({R"({"id":"r-)" + std::to_string(i) + R"(","type":")" +
                        (i % 2 ? "Refund" : "OrderPlaced") + "\"}",
                    {{"tenant", i % 4 == 1 ? "acme" : "globex"}}});
  for (int i = 1; i < 10; i += 2) msgs.push_back(msgs[i]);  // 5 refunds sent twice
  msgs.push_back({R"({"id":"bad-1","type":)", {}});         // malformed: no fix helps
  msgs.push_back({"not json\nat all", {}});
  send(url, msgs);
  const std::string before =
      "route:\n  field: type\n  tables: {OrderPlaced: orders}\n"
      "  unknown: reject\n";
  const auto summary = run_until_drained(config(url, before, "[id, type]"));
  ASSERT_EQ(summary.written, 60u);
  ASSERT_EQ(summary.rejected_validation, 65u);
  ASSERT_EQ(summary.rejected_malformed, 2u);
  const std::string dir = ::testing::TempDir() + "/sluice-rejects-" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/before.yaml") << yaml_of(url, before, "[id, type]");
  std::ofstream(dir + "/after.yaml")
      << yaml_of(url,
                 "route:\n  field: type\n  tables: {OrderPlaced: orders, Refund: refunds}\n"
                 "  unknown: reject\nfilter:\n  - attributes: {tenant: [acme]}\n",
                 "[id, type]");
  const std::string bin = SLUICE_BINARY;
  auto rejects = [&](const std::string& args) {
    return test::run_with_status(bin + " rejects " + args + " 2>&1");
  };

  // The rows on standard output, the count on standard error: a log line there (the
  // ThreadSanitizer build once wrote one) is not a row.
  const auto listed =
      test::run_with_status(bin + " rejects list --config " + dir +
                            "/before.yaml --reason validation --limit 1000 2>" + dir + "/list.err");
  std::ifstream list_err(dir + "/list.err");
  const std::string list_errors((std::istreambuf_iterator<char>(list_err)),
                                std::istreambuf_iterator<char>());
  ASSERT_EQ(listed.first, 0) << listed.second << list_errors;
  EXPECT_EQ(std::count(listed.second.begin(), listed.second.end(), '\n'), 1 + 65)
      << "a header, the rows:\n"
      << listed.second << "standard error:\n"
      << list_errors;
  EXPECT_NE(listed.second.find("route: type is \"Refund\""), std::string::npos) << listed.second;
  EXPECT_NE(list_errors.find("65 row(s)"), std::string::npos) << list_errors;

  const auto exported =
      rejects("export --config " + dir + "/before.yaml --out " + dir + "/r.jsonl");
  ASSERT_EQ(exported.first, 0) << exported.second;
  EXPECT_NE(exported.second.find("65 line(s)"), std::string::npos) << exported.second;
  EXPECT_NE(exported.second.find("2 body(ies) that are not JSON left out"), std::string::npos)
      << exported.second;
  std::ifstream lines(dir + "/r.jsonl");
  int n = 0;
  for (std::string line; std::getline(lines, line); ++n)
    EXPECT_FALSE(nlohmann::json::parse(line, nullptr, false).is_discarded()) << line;
  EXPECT_EQ(n, 65);

  // The database will refuse one record (r-5, sent twice): it alone stays behind.
  {
    sqlite3* handle = nullptr;
    ASSERT_EQ(sqlite3_open(db_.c_str(), &handle), SQLITE_OK);
    EXPECT_EQ(sqlite3_exec(handle,
                           "CREATE TABLE refunds (hash TEXT NOT NULL, message_id TEXT, document "
                           "TEXT NOT NULL CHECK (json_extract(document, '$.id') <> 'r-5'), "
                           "written_at TEXT)",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(handle);
  }
  const auto dry = rejects("replay --config " + dir + "/after.yaml --dry-run");
  ASSERT_EQ(dry.first, 0) << dry.second;
  // Refunds of acme: 30, and 3 of the 5 sent twice; globex's 32 filtered.
  EXPECT_NE(dry.second.find("would be written 33 (new or duplicate), filtered 32"),
            std::string::npos)
      << dry.second;
  EXPECT_NE(dry.second.find("still rejected 2 (malformed 2)"), std::string::npos) << dry.second;
  EXPECT_TRUE(stored("hash", "refunds").empty()) << "a dry run writes nothing";

  const auto replayed = rejects("replay --config " + dir + "/after.yaml");
  ASSERT_EQ(replayed.first, 0) << replayed.second;
  EXPECT_NE(replayed.second.find("67 row(s)"), std::string::npos) << replayed.second;
  EXPECT_NE(replayed.second.find("stored 29, duplicates 2, filtered 32"), std::string::npos)
      << replayed.second;
  EXPECT_NE(replayed.second.find("refused by the database 2: left for another replay"),
            std::string::npos)
      << replayed.second;
  EXPECT_EQ(stored("json_extract(document, '$.type')", "refunds"),
            std::vector<std::string>(29, "Refund"))
      << "exactly the distinct records of acme the database takes";
  EXPECT_EQ(stored("hash", "orders").size(), 60u);

  const auto again = rejects("replay --config " + dir + "/after.yaml");
  ASSERT_EQ(again.first, 0) << again.second;
  EXPECT_NE(again.second.find("4 row(s)"), std::string::npos)
      << "only the malformed and the refused ones are left: " << again.second;
  EXPECT_NE(again.second.find("stored 0"), std::string::npos) << again.second;
  const auto all = rejects("list --config " + dir + "/after.yaml --all --limit 1000");
  EXPECT_NE(all.second.find("replayed_at"), std::string::npos) << all.second;
  EXPECT_NE(all.second.find("67 row(s)"), std::string::npos) << all.second;
  std::filesystem::remove_all(dir);
}

// A rejects table written by an earlier release (no replayed_at, no properties columns)
// is read and given the columns; a replay killed with SIGKILL half-way, then run again,
// ends with exactly the distinct records and every row marked (what the killed run had
// written but not marked is written again: a duplicate).
TEST_F(OperationsPipeline, RejectsOfAnEarlierReleaseAndAKilledReplayLoseNone) {
  const std::string url = make_queue("ops-old-rejects");
  db_ = ::testing::TempDir() + "/sluice-ops-old-" + std::to_string(getpid()) + ".db";
  test::remove_sqlite(db_);
  constexpr int kRows = 40000;
  {
    sqlite3* handle = nullptr;
    ASSERT_EQ(sqlite3_open(db_.c_str(), &handle), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(handle,
                           "CREATE TABLE rejects (id INTEGER PRIMARY KEY, message_id TEXT, reason "
                           "TEXT NOT NULL, detail TEXT, body TEXT, source TEXT, rejected_at TEXT "
                           "NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')));"
                           "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE "
                           "i < 39999) INSERT INTO rejects (message_id, reason, detail, body, "
                           "source) SELECT 'm-' || i, 'validation', 'missing required field id', "
                           "'{\"id\":\"old-' || (i % 30000) || '\",\"type\":\"t\"}', 'q' FROM n",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(handle);
  }
  const std::string file =
      ::testing::TempDir() + "/sluice-ops-old-" + std::to_string(getpid()) + ".yaml";
  std::ofstream(file) << yaml_of(url, "");
  const std::string bin = SLUICE_BINARY;
  const auto listed =
      test::run_with_status(bin + " rejects list --limit 3 --config " + file + " 2>&1");
  ASSERT_EQ(listed.first, 0) << listed.second;
  EXPECT_NE(listed.second.find("missing required field id"), std::string::npos) << listed.second;
  auto scalar = [&](const std::string& sql) {
    sqlite3* handle = nullptr;
    sqlite3_open(db_.c_str(), &handle);
    sqlite3_stmt* statement = nullptr;
    long value = -1;
    if (sqlite3_prepare_v2(handle, sql.c_str(), -1, &statement, nullptr) == SQLITE_OK &&
        sqlite3_step(statement) == SQLITE_ROW)
      value = sqlite3_column_int64(statement, 0);
    sqlite3_finalize(statement);
    sqlite3_close(handle);
    return value;
  };
  EXPECT_EQ(scalar("SELECT count(*) FROM pragma_table_info('rejects') WHERE name IN "
                   "('replayed_at', 'properties')"),
            2)
      << "the earlier table got the columns";

  const pid_t killed = spawn_sluice({"rejects", "replay", "--config", file});
  test::wait_until([&] { return scalar("SELECT count(*) FROM records") > 0; });
  ::kill(killed, SIGKILL);
  EXPECT_EQ(wait_exit(killed), -SIGKILL);
  const long marked = scalar("SELECT count(*) FROM rejects WHERE replayed_at IS NOT NULL");
  EXPECT_LT(marked, kRows) << "killed half-way";
  EXPECT_GT(scalar("SELECT count(*) FROM records"), 0) << "it had started";
  const auto rest = test::run_with_status(bin + " rejects replay --config " + file + " 2>&1");
  ASSERT_EQ(rest.first, 0) << rest.second;
  EXPECT_NE(rest.second.find(std::to_string(kRows - marked) + " row(s)"), std::string::npos)
      << rest.second;
  EXPECT_EQ(scalar("SELECT count(*) FROM records"), 30000) << "exactly the distinct records";
  EXPECT_EQ(scalar("SELECT count(*) FROM rejects WHERE replayed_at IS NULL"), 0);
  std::filesystem::remove(file);
}

TEST_F(OperationsPipeline, AProducerIdIsTheIdentityAndAMissingOneIsRejected) {
  const std::string url = make_queue("ops-identity");
  send(url, {
                // two bodies, one producer id: one record (the second a duplicate)
                {R"({"id":"a","type":"first"})", {{"producer-id", "p-1"}}},
                {R"({"id":"b","type":"second"})", {{"producer-id", "p-1"}}},
                // one body, two producer ids: two records
                {R"({"id":"c","type":"x"})", {{"producer-id", "p-2"}}},
                {R"({"id":"c","type":"x"})", {{"producer-id", "p-3"}}},
                // no producer id: rejected, not stored under its content
                {R"({"id":"d","type":"x"})", {}},
            });
  const auto summary = run_until_drained(config(url, "  key: {attribute: producer-id}\n"));
  EXPECT_EQ(summary.received, 5u);
  EXPECT_EQ(summary.written, 3u);
  EXPECT_EQ(summary.duplicates, 1u);
  EXPECT_EQ(summary.rejected_validation, 1u);
  EXPECT_EQ(summary.records_in_sink, 3u);
  EXPECT_EQ(stored("json_extract(document, '$.id')"), (std::vector<std::string>{"a", "c", "c"}))
      << "p-1 is stored once, as its first body";
  EXPECT_EQ(queue_total(url), 0);
}

TEST_F(OperationsPipeline, FifoDeduplicationIdIsTheIdentity) {
  const std::string name = test::unique_queue_name("ops-dedup") + ".fifo";
  test::run(io_, client_->create_queue(name, {{"FifoQueue", "true"}}));
  const std::string url = test::Emulator::shared().queue_url(name);
  std::vector<sqs::SendMessageEntry> entries;
  for (int i = 0; i < 6; ++i) {
    sqs::SendMessageEntry e;
    e.body = R"({"id":"same","type":")" + std::to_string(i) + "\"}";
    e.message_group_id = "g";
    e.message_deduplication_id = "d-" + std::to_string(i);
    entries.push_back(std::move(e));
  }
  sqs::Publisher publisher(client_, url);
  for (const auto& o : test::run(io_, publisher.send_batch(std::move(entries))))
    EXPECT_TRUE(o.ok) << o.error_message;
  // Content identity would store one record (one id); the deduplication ids are six.
  const auto summary = run_until_drained(config(url, "  key: deduplication_id\n"));
  EXPECT_EQ(summary.written, 6u);
  EXPECT_EQ(summary.records_in_sink, 6u);
}

// Pause and resume through `sluice ctl` against a running `sluice run` (rate-limited so
// that the pause lands mid-run): nothing is received while paused (the queue's own
// counts hold still), what was held is finished, a wrong token is refused and changes
// nothing, and resume drains the rest: every record once.
TEST_F(OperationsPipeline, PauseStopsReceivingAndResumeGoesOn) {
  const std::string url = make_queue("ops-pause");
  std::vector<std::pair<std::string, std::map<std::string, std::string>>> msgs;
  for (int i = 0; i < 400; ++i)
    msgs.push_back({R"({"id":"p-)" + std::to_string(i) + R"(","type":"t"})", {}});
  send(url, msgs);
  const int port = test::free_port();
  const std::string admin = "http://127.0.0.1:" + std::to_string(port);
  db_ = ::testing::TempDir() + "/sluice-ops-pause-" + std::to_string(getpid()) + ".db";
  test::remove_sqlite(db_);
  const std::string path = ::testing::TempDir() + "/sluice-ops-pause.yaml";
  std::ofstream(path) << "name: orders\nsource:\n  max_messages_per_second: 60\n  sqs:\n"
                      << "    queue_url: " << url
                      << "\n    endpoint_url: " << test::Emulator::shared().endpoint()
                      << "\n    region: us-east-1\n    poll_wait: 1s\n"
                      << "sink:\n  type: sqlite\n  sqlite:\n    path: " << db_ << "\n"
                      << "normalize:\n  fields:\n    - {name: id, from: /id, type: string}\n"
                      << "identity:\n  versions:\n    V1: [id]\n"
                      << "metrics:\n  listen: 127.0.0.1:" << port << "\n"
                      << "admin:\n  enabled: true\n";
  const std::string token = "s3cret-admin-token";
  setenv("SLUICE_ADMIN_TOKEN", token.c_str(), 1);
  const pid_t pid = spawn_sluice({"run", "--config", path, "--until-drained"});
  unsetenv("SLUICE_ADMIN_TOKEN");
  // Running, some received.
  std::string status;
  test::wait_until([&] {
    status = ctl("status --url " + admin, token).second;
    return figure(status, "received") >= 60;
  });
  ASSERT_GE(figure(status, "received"), 60) << status;
  ASSERT_NE(status.find("orders  running"), std::string::npos) << status;

  const auto paused = ctl("pause --url " + admin + " orders", token);
  ASSERT_EQ(paused.first, 0) << paused.second;
  EXPECT_NE(paused.second.find("orders  paus"), std::string::npos) << paused.second;
  // The open long polls return (pausing), what they and the others held is finished
  // (written and acked), then nothing moves.
  test::wait_until([&] {
    status = ctl("status --url " + admin + " orders", token).second;
    return figure(status, "in_flight") == 0 && status.find("orders  paused") != std::string::npos;
  });
  ASSERT_EQ(figure(status, "in_flight"), 0) << status;
  // "paused" is the event: every receive loop has ended (the state says "pausing" while
  // one runs), and none starts before a resume.
  const long received_at_pause = figure(status, "received");
  const auto queue_at_pause = test::run(io_, client_->get_queue_attributes(url));
  status = ctl("status --url " + admin + " orders", token).second;
  EXPECT_EQ(figure(status, "received"), received_at_pause) << status;
  EXPECT_NE(status.find("orders  paused"), std::string::npos) << status;
  const auto queue_later = test::run(io_, client_->get_queue_attributes(url));
  EXPECT_EQ(queue_later.at("ApproximateNumberOfMessages"),
            queue_at_pause.at("ApproximateNumberOfMessages"));
  EXPECT_EQ(queue_later.at("ApproximateNumberOfMessagesNotVisible"), "0");
  EXPECT_EQ(std::stol(queue_later.at("ApproximateNumberOfMessages")), 400 - received_at_pause);

  // A wrong token, or none: 401 and nothing changes.
  const auto refused = ctl("resume --url " + admin + " orders", "not-the-token");
  EXPECT_EQ(refused.first, 1) << refused.second;
  EXPECT_NE(refused.second.find("refused the token"), std::string::npos) << refused.second;
  EXPECT_EQ(refused.second.find(token), std::string::npos) << "never echoes a token";
  const auto anonymous = ctl("resume --url " + admin + " orders", "");
  EXPECT_EQ(anonymous.first, 1) << anonymous.second;
  EXPECT_NE(ctl("status --url " + admin, token).second.find("orders  paused"), std::string::npos);
  EXPECT_EQ(ctl("pause --url " + admin + " nosuch", token).first, 2) << "an unknown pipeline";
  // Not ready while paused, and /readyz says why (sluice health: exit 1 on a 503).
  const auto readyz =
      test::run_with_status(std::string(SLUICE_BINARY) + " health --url " + admin + "/readyz 2>&1");
  EXPECT_EQ(readyz.first, 1) << readyz.second;
  EXPECT_NE(readyz.second.find("answered 503"), std::string::npos) << readyz.second;

  const auto resumed = ctl("resume --url " + admin + " orders", token);
  ASSERT_EQ(resumed.first, 0) << resumed.second;
  EXPECT_EQ(wait_exit(pid), 0);
  EXPECT_EQ(stored("json_extract(document, '$.id')").size(), 400u);
  EXPECT_EQ(queue_total(url), 0);
}

// source.max_messages_per_second: over any window between two receives, the messages
// received stay within rate x window + one receive (the bucket), give or take the
// receives' own latency (tokens are taken before a receive, its messages stamped after
// it: 50 ms of slack). Not a timed assertion of speed: a bound the limiter promises.
TEST_F(OperationsPipeline, RateLimitIsNeverExceededByMoreThanOneReceive) {
  const std::string url = make_queue("ops-rate");
  std::vector<std::pair<std::string, std::map<std::string, std::string>>> msgs;
  for (int i = 0; i < 300; ++i)
    msgs.push_back({R"({"id":"r-)" + std::to_string(i) + R"(","type":"t"})", {}});
  send(url, msgs);
  const double rate = 100;
  auto c = config(url, "");
  c.container.max_messages_per_second = rate;
  c.container.auto_concurrency = false;  // four receives compete for the tokens
  c.container.min_concurrent_receives = 4;
  c.container.max_concurrent_receives = 4;
  pipeline::FieldSpec at = pipeline::meta_field("at", pipeline::FieldType::timestamp,
                                                pipeline::MetaField::received_time);
  at.timestamp.output = pipeline::TimeOutput::epoch_ms;
  c.transform.fields.push_back(at);
  const auto summary = run_until_drained(c);
  ASSERT_EQ(summary.written, 300u);
  std::vector<long long> times;
  for (const auto& t : stored("json_extract(document, '$.at')")) times.push_back(std::stoll(t));
  std::sort(times.begin(), times.end());
  ASSERT_EQ(times.size(), 300u);
  const double burst = 10;  // one SQS receive
  for (std::size_t i = 0; i < times.size(); ++i)
    for (std::size_t j = i; j < times.size(); ++j) {
      const double window = static_cast<double>(times[j] - times[i]) / 1000.0;
      ASSERT_LE(static_cast<double>(j - i + 1), rate * (window + 0.05) + burst)
          << (j - i + 1) << " messages received within " << window << " s";
    }
  const double span = static_cast<double>(times.back() - times.front()) / 1000.0;
  EXPECT_GE(span, (300 - burst) / rate - 0.05) << "300 messages at 100/s take about 3 s";
}

// sluice dlq: 1,000 dead letters with their reasons; peek consumes none; a redrive
// picked by reason at a capped rate moves exactly those; a redrive killed with SIGKILL
// half-way, then run again, loses none; the pipeline then stores every record once
// (what the killed run sent twice is a duplicate, absorbed by the hash).
TEST_F(OperationsPipeline, RedriveMovesDeadLettersBackAndAKilledRedriveLosesNone) {
  const std::string source = make_queue("ops-src"), dlq = make_queue("ops-dlq");
  std::vector<std::pair<std::string, std::map<std::string, std::string>>> letters;
  for (int i = 0; i < 1000; ++i)
    letters.push_back({R"({"id":"d-)" + std::to_string(i) + R"(","type":"t"})",
                       {{"sluice-reject-reason", i % 10 < 7 ? "validation" : "schema_drift"},
                        {"sluice-source-queue", source}}});
  for (std::size_t i = 0; i < letters.size(); i += 100)
    send(dlq,
         {letters.begin() + static_cast<long>(i), letters.begin() + static_cast<long>(i) + 100});
  const std::string sqs =
      " --endpoint-url " + test::Emulator::shared().endpoint() + " --region us-east-1 --queue-url ";
  const std::string bin = SLUICE_BINARY;

  const auto peeked =
      test::run_with_status(bin + " dlq peek --max 5 --json" + sqs + dlq + " 2>/dev/null");
  ASSERT_EQ(peeked.first, 0) << peeked.second;
  std::size_t lines = 0;
  for (std::size_t at = 0; (at = peeked.second.find('\n', at)) != std::string::npos; ++at) ++lines;
  EXPECT_EQ(lines, 5u) << peeked.second;
  const auto first = nlohmann::json::parse(peeked.second.substr(0, peeked.second.find('\n')));
  EXPECT_TRUE(first["reason"] == "validation" || first["reason"] == "schema_drift") << first;
  EXPECT_EQ(first["source_queue"], source);
  EXPECT_EQ(queue_total(dlq), 1000) << "peek consumes nothing";

  const auto started = std::chrono::steady_clock::now();
  const auto picked =
      test::run_with_status(bin + " dlq redrive --to " + source +
                            " --filter-reason validation --rate 400" + sqs + dlq + " 2>&1");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  ASSERT_EQ(picked.first, 0) << picked.second;
  EXPECT_NE(picked.second.find("700 moved, 0 failed"), std::string::npos) << picked.second;
  EXPECT_GE(seconds, (700 - 10) / 400.0) << "700 at 400 a second cannot take less";
  EXPECT_EQ(queue_total(dlq), 300);
  EXPECT_EQ(queue_total(source), 700);

  // The rest at 100 a second, killed once it has moved some, then run again.
  const pid_t killed =
      spawn_sluice({"dlq", "redrive", "--to", source, "--rate", "100", "--visibility-timeout", "2",
                    "--endpoint-url", test::Emulator::shared().endpoint(), "--region", "us-east-1",
                    "--queue-url", dlq});
  // Deleted from the dead-letter queue: moved (a message sent on but not yet deleted
  // still counts in the dead-letter queue).
  EXPECT_TRUE(test::wait_until([&] { return queue_total(dlq) < 300; })) << "it had started";
  ::kill(killed, SIGKILL);
  EXPECT_EQ(wait_exit(killed), -SIGKILL);
  const int left = queue_total(dlq);
  EXPECT_GT(left, 0) << "killed half-way";
  EXPECT_LT(left, 300) << "it had started";
  // What it held comes back once its 2 s visibility timeout is over.
  EXPECT_TRUE(test::wait_until([&] {
    const auto a = test::run(io_, client_->get_queue_attributes(dlq));
    return a.at("ApproximateNumberOfMessagesNotVisible") == "0";
  }));
  const auto rest =
      test::run_with_status(bin + " dlq redrive --to " + source + sqs + dlq + " 2>&1");
  ASSERT_EQ(rest.first, 0) << rest.second;
  EXPECT_EQ(queue_total(dlq), 0);

  const auto summary = run_until_drained(config(source, ""));
  EXPECT_EQ(summary.records_in_sink, 1000u);
  EXPECT_EQ(summary.written, 1000u);
  EXPECT_EQ(summary.duplicates, summary.received - 1000);
}

// `sluice dlq redrive` picks nothing out: the service's own StartMessageMoveTask moves
// the messages where it has the API and the queue is a dead-letter queue of another
// (local-aws-sqs, as SQS), watched until the task ends; fauxqs lacks the API: the redrive
// says so and copies (receive, send, delete). Either way every letter is back, once.
TEST_F(OperationsPipeline, RedriveUsesTheServicesMoveTaskWhereItHasOne) {
  const std::string dlq = make_queue("ops-mt-dlq");
  const auto dlq_arn =
      test::run(io_, client_->get_queue_attributes(dlq, std::vector<std::string>{"QueueArn"}))
          .at("QueueArn");
  const std::string source_name = test::unique_queue_name("ops-mt-src");
  test::run(
      io_, client_->create_queue(
               source_name, {{"RedrivePolicy", R"({"maxReceiveCount":"5","deadLetterTargetArn":")" +
                                                   dlq_arn + R"("})"}}));
  const std::string source = test::Emulator::shared().queue_url(source_name);
  std::vector<std::pair<std::string, std::map<std::string, std::string>>> letters;
  for (int i = 0; i < 200; ++i)
    letters.push_back({R"({"id":"mt-)" + std::to_string(i) + R"(","type":"t"})",
                       {{"sluice-reject-reason", "validation"}}});
  for (std::size_t i = 0; i < letters.size(); i += 100)
    send(dlq,
         {letters.begin() + static_cast<long>(i), letters.begin() + static_cast<long>(i) + 100});
  const std::string bin = SLUICE_BINARY,
                    sqs = " --endpoint-url " + test::Emulator::shared().endpoint() +
                          " --region us-east-1 --queue-url " + dlq + " --to " + source;
  const bool has_move_tasks = test::Emulator::server_name() == "local-aws-sqs";
  const auto forced =
      test::run_with_status(bin + " dlq redrive --method move-task" + sqs + " 2>&1");
  if (has_move_tasks) {
    ASSERT_EQ(forced.first, 0) << forced.second;
    EXPECT_NE(forced.second.find("StartMessageMoveTask started"), std::string::npos)
        << forced.second;
    EXPECT_NE(forced.second.find("200 moved of 200, COMPLETED"), std::string::npos)
        << forced.second;
  } else {
    EXPECT_NE(forced.first, 0) << forced.second;
    EXPECT_NE(forced.second.find("StartMessageMoveTask"), std::string::npos) << forced.second;
    EXPECT_EQ(queue_total(dlq), 200) << "nothing moved";
    const auto copied = test::run_with_status(bin + " dlq redrive" + sqs + " 2>&1");
    ASSERT_EQ(copied.first, 0) << copied.second;
    EXPECT_NE(copied.second.find("StartMessageMoveTask refused"), std::string::npos)
        << copied.second;
    EXPECT_NE(copied.second.find("200 moved, 0 failed"), std::string::npos) << copied.second;
  }
  EXPECT_EQ(queue_total(dlq), 0);
  EXPECT_EQ(queue_total(source), 200);
  const auto summary = run_until_drained(config(source, ""));
  EXPECT_EQ(summary.records_in_sink, 200u);
  EXPECT_EQ(summary.received, 200u);
}

// sluice dlq on RabbitMQ: a dead-letter queue filled by the broker (basic.reject into
// x-dead-letter-routing-key: reason "rejected" in x-death) and by a producer that names
// its reason (sluice-reject-reason); peek and stats requeue what they looked at; a
// redrive picked by reason at a capped rate moves exactly those, with confirms; one to an
// exchange that routes nowhere moves none (mandatory returns); one killed with SIGKILL
// half-way, then run again, loses none; the pipeline then stores every record once.
TEST_F(OperationsPipeline, RabbitMqRedriveMovesDeadLettersBackAndAKilledRedriveLosesNone) {
  auto& rabbit = test::RabbitMq::shared();
  const std::string queue = "ops-rdl-" + std::to_string(getpid()), dlq = queue + "-dlq";
  const std::string bin = SLUICE_BINARY, url = " --amqp-url '" + rabbit.uri() + "'";
  test::run_command(bin + " queue create" + url + " --name " + queue + " --dead-letter-queue " +
                    dlq + " 2>&1");
  auto publish = [&](const std::string& routing_key, const std::vector<std::string>& bodies,
                     const std::string& flags) {
    const std::string lines = ::testing::TempDir() + "/ops-rdl.jsonl";
    {
      std::ofstream out(lines);
      for (const auto& body : bodies) out << body << "\n";
    }
    test::run_command(bin + " publish" + url + " --routing-key " + routing_key + " --file " +
                      lines + flags + " 2>&1");
  };
  db_ = ::testing::TempDir() + "/sluice-ops-rdl-" + std::to_string(getpid()) + ".db";
  test::remove_sqlite(db_);
  const auto cfg = app::parse_config(
      "source:\n  type: rabbitmq\n  rabbitmq:\n    url: " + rabbit.uri() + "\n    queue: " + queue +
      "\n    dead_letter_exchange: true\nsink:\n  type: sqlite\n  sqlite:\n    path: " + db_ +
      "\nmetrics:\n  listen: 127.0.0.1:0\nlogging:\n  level: warn\n"
      "normalize:\n  fields:\n"
      "    - {name: id, from: /id, type: string, required: true}\n"
      "    - {name: type, from: /type, type: string}\n"
      "identity:\n  versions:\n    V1: [id]\n");

  // 20 rejected by the pipeline (no id): the broker dead-letters them.
  std::vector<std::string> bad;
  for (int i = 0; i < 20; ++i) bad.push_back(R"({"type":"no-id-)" + std::to_string(i) + R"("})");
  publish(queue, bad, "");
  const auto rejected = run_until_drained(cfg);
  EXPECT_EQ(rejected.records_in_sink, 0u);
  ASSERT_EQ(rabbit.queue(dlq).ready, 20);
  // 1,000 more whose producer named the reason.
  std::vector<std::string> validation, drift;
  for (int i = 0; i < 1000; ++i)
    (i % 10 < 7 ? validation : drift)
        .push_back(R"({"id":"d-)" + std::to_string(i) + R"(","type":"t"})");
  publish(dlq, validation, " --header sluice-reject-reason=validation");
  publish(dlq, drift, " --header sluice-reject-reason=schema_drift");
  ASSERT_EQ(rabbit.queue(dlq).ready, 1020);
  const std::string on = url + " --queue " + dlq;

  const auto peeked = test::run_with_status(bin + " dlq peek --max 5 --json" + on + " 2>/dev/null");
  ASSERT_EQ(peeked.first, 0) << peeked.second;
  std::size_t lines = 0;
  for (std::size_t at = 0; (at = peeked.second.find('\n', at)) != std::string::npos; ++at) ++lines;
  EXPECT_EQ(lines, 5u) << peeked.second;
  const auto first = nlohmann::json::parse(peeked.second.substr(0, peeked.second.find('\n')));
  EXPECT_EQ(first["reason"], "rejected") << first;  // x-death's, the broker's
  EXPECT_EQ(first["source_queue"], queue) << first;
  EXPECT_EQ(first["routing_key"], queue) << first;
  EXPECT_EQ(first["death_count"], 1) << first;
  EXPECT_EQ(rabbit.queue(dlq).ready, 1020) << "peek consumes nothing";
  const auto stats = test::run_with_status(bin + " dlq stats" + on + " 2>&1");
  ASSERT_EQ(stats.first, 0) << stats.second;
  EXPECT_NE(stats.second.find("1020 ready"), std::string::npos) << stats.second;
  EXPECT_NE(stats.second.find("rejected  20"), std::string::npos) << stats.second;
  EXPECT_NE(stats.second.find("from           " + queue), std::string::npos) << stats.second;

  // An exchange that routes nowhere: every one returned, every one left (--max counts
  // the moved ones, so each is tried once; the count at the start ends the run).
  const auto nowhere = test::run_with_status(bin + " dlq redrive --to-exchange amq.direct " +
                                             "--routing-key nowhere --max 5" + on + " 2>&1");
  EXPECT_EQ(nowhere.first, 1) << nowhere.second;
  EXPECT_NE(nowhere.second.find("0 moved, 1020 failed"), std::string::npos) << nowhere.second;
  EXPECT_NE(nowhere.second.find("312 NO_ROUTE"), std::string::npos) << nowhere.second;
  const auto missing =
      test::run_with_status(bin + " dlq redrive --to no-such-queue" + on + " 2>&1");
  EXPECT_EQ(missing.first, 2) << missing.second;
  EXPECT_NE(missing.second.find("--to no-such-queue: not found"), std::string::npos)
      << missing.second;
  EXPECT_EQ(rabbit.queue(dlq).ready, 1020);

  const auto started = std::chrono::steady_clock::now();
  const auto picked = test::run_with_status(
      bin + " dlq redrive --to " + queue + " --filter-reason validation --rate 400" + on + " 2>&1");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  ASSERT_EQ(picked.first, 0) << picked.second;
  EXPECT_NE(picked.second.find("700 moved, 0 failed"), std::string::npos) << picked.second;
  EXPECT_GE(seconds, (700 - 10) / 400.0) << "700 at 400 a second cannot take less";
  EXPECT_EQ(rabbit.queue(dlq).ready, 320);
  EXPECT_EQ(rabbit.queue(queue).ready, 700);

  // SIGTERM: the window in flight is finished (confirmed, acknowledged), nothing is
  // moved twice, and it says it stopped (exit 1).
  // Each signal comes once the run has moved some: a fixed sleep can end before a slow
  // start (a sanitizer build on a loaded machine), and the rate leaves time to be seen.
  // 10 a second: 32 s for the 320, far longer than the broker's tool takes to see the
  // first moved on a loaded machine.
  const pid_t stopped = spawn_sluice({"dlq", "redrive", "--to", queue, "--rate", "10", "--amqp-url",
                                      rabbit.uri(), "--queue", dlq});
  EXPECT_TRUE(test::wait_until([&] { return rabbit.queue(queue).ready > 700; }))
      << "it had started";
  ::kill(stopped, SIGTERM);
  EXPECT_EQ(wait_exit(stopped), 1);
  const long after_term = rabbit.queue(dlq).ready;
  EXPECT_LT(after_term, 320) << "it had moved some";
  EXPECT_EQ(after_term + rabbit.queue(queue).ready, 1020) << "none twice, none lost";

  // The rest at 10 a second, killed once it has moved some, then run again.
  const pid_t killed = spawn_sluice({"dlq", "redrive", "--to", queue, "--rate", "10", "--amqp-url",
                                     rabbit.uri(), "--queue", dlq});
  EXPECT_TRUE(test::wait_until([&] { return rabbit.queue(queue).ready > 1020 - after_term; }))
      << "it had started";
  ::kill(killed, SIGKILL);
  EXPECT_EQ(wait_exit(killed), -SIGKILL);
  long left = -1;  // the broker requeues what the dead connection held
  test::wait_until(
      [&] { return (left = rabbit.queue(dlq).ready) + rabbit.queue(queue).ready >= 1020; });
  EXPECT_GT(left, 0) << "killed half-way";
  EXPECT_LT(left, 320) << "it had started";
  const auto rest = test::run_with_status(bin + " dlq redrive --to " + queue + on + " 2>&1");
  ASSERT_EQ(rest.first, 0) << rest.second;
  EXPECT_EQ(rabbit.queue(dlq).ready, 0);

  // The 1,000 stored once; the 20 without an id rejected again, back in the dead letters.
  const auto summary = run_until_drained(cfg);
  EXPECT_EQ(summary.records_in_sink, 1000u);
  EXPECT_EQ(summary.written, 1000u);
  EXPECT_EQ(summary.duplicates, summary.received - 1000 - 20);
  EXPECT_EQ(rabbit.queue(dlq).ready, 20);
}

// A single-active-consumer quorum queue is one ordered group across instances: three
// `sluice run`, two waiting (the broker lists three consumers, only one receives). The
// database fails the write of event 1500 for a while (a trigger's error, transient):
// nothing after it is written meanwhile. Then the active one is stopped (SIGTERM), and
// the next active one killed (kill -9), each mid-run: the broker gets back what it held
// and makes another active, which goes on from there. Every event is stored once, the
// rows in the order the events were published.
TEST_F(OperationsPipeline, RabbitMqSingleActiveConsumerKeepsOrderWhenTheActiveInstanceIsKilled) {
  auto& rabbit = test::RabbitMq::shared();
  const std::string queue = "ops-sac-" + std::to_string(getpid());
  constexpr int kEvents = 3000;
  create_and_publish(queue, "--quorum --single-active-consumer", kEvents, "s");
  // A quorum queue's counts reach rabbitmqctl a moment later.
  ASSERT_TRUE(test::wait_until([&] { return rabbit.queue(queue).ready == kEvents; },
                               std::chrono::seconds(10)))
      << rabbit.queue(queue).ready;
  db_ = ::testing::TempDir() + "/sluice-ops-sac-" + std::to_string(getpid()) + ".db";
  test::remove_sqlite(db_);
  const std::string path = ::testing::TempDir() + "/sluice-ops-sac.yaml";
  std::ofstream(path) << "source:\n  type: rabbitmq\n  max_messages_per_second: 300\n"
                      << "  failure_backoff: 200ms\n  failure_backoff_max: 1s\n"
                      << "  rabbitmq:\n    url: " << rabbit.uri() << "\n    queue: " << queue
                      << "\n    single_active_consumer: true\n    prefetch: 100\n"
                      // A failed write goes back to the queue at once (a rewind).
                      << "sink:\n  type: sqlite\n  max_attempts: 1\n  sqlite:\n    path: " << db_
                      << "\n"
                      << "metrics:\n  listen: 127.0.0.1:0\nlogging:\n  level: warn\n"
                      << "normalize:\n  fields:\n"
                      << "    - {name: id, from: /id, type: string, required: true}\n"
                      << "    - {name: seq, from: /seq, type: integer, required: true}\n"
                      << "identity:\n  versions:\n    V1: [id]\n";
  // The stored sequence numbers in the order the rows were written (none while the
  // table is not there yet).
  auto seqs = [&] {
    std::vector<long> out;
    sqlite3* handle = nullptr;
    if (sqlite3_open_v2(db_.c_str(), &handle, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
      sqlite3_busy_timeout(handle, 2000);
      sqlite3_stmt* statement = nullptr;
      if (sqlite3_prepare_v2(handle,
                             "SELECT json_extract(document, '$.seq') FROM records ORDER BY rowid",
                             -1, &statement, nullptr) == SQLITE_OK) {
        while (sqlite3_step(statement) == SQLITE_ROW)
          out.push_back(sqlite3_column_int64(statement, 0));
      }
      sqlite3_finalize(statement);
    }
    sqlite3_close(handle);
    return out;
  };
  auto exec = [&](const std::string& sql) {
    sqlite3* handle = nullptr;
    ASSERT_EQ(sqlite3_open(db_.c_str(), &handle), SQLITE_OK);
    sqlite3_busy_timeout(handle, 5000);
    char* error = nullptr;
    EXPECT_EQ(sqlite3_exec(handle, sql.c_str(), nullptr, nullptr, &error), SQLITE_OK) << error;
    sqlite3_free(error);
    sqlite3_close(handle);
  };
  // The sink's table, made first, with a trigger that fails event 1500 while `block`
  // has a row: abs() of the least integer is a runtime error (SQLITE_ERROR: transient).
  exec(
      "CREATE TABLE records (hash TEXT NOT NULL, message_id TEXT, document TEXT NOT NULL, "
      "written_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')));"
      "CREATE TABLE block (x); INSERT INTO block VALUES (1);"
      "CREATE TRIGGER fail_1500 BEFORE INSERT ON records WHEN "
      "json_extract(NEW.document, '$.seq') = 1500 AND EXISTS (SELECT 1 FROM block) "
      "BEGIN SELECT abs(-9223372036854775807 - 1); END;");
  // The first becomes the active consumer; the others wait from the start.
  const pid_t first = spawn_sluice({"run", "--config", path});
  ASSERT_TRUE(test::wait_until([&] { return !seqs().empty(); }, std::chrono::seconds(60)))
      << "never started";
  const pid_t second = spawn_sluice({"run", "--config", path});
  EXPECT_TRUE(test::wait_until([&] { return rabbit.queue(queue).consumers == 2; },
                               std::chrono::seconds(30)))
      << "the second instance never registered its consumer";
  const pid_t third = spawn_sluice({"run", "--config", path});
  EXPECT_TRUE(test::wait_until([&] { return rabbit.queue(queue).consumers == 3; },
                               std::chrono::seconds(30)))
      << "the third instance never registered its consumer";
  // A run that holds event 1500 fails whole: the rows stop short of it (a run that ends
  // before it still goes in); none after it while it fails (their order is checked at
  // the end).
  ASSERT_TRUE(test::wait_until([&] { return seqs().size() >= 1350; }, std::chrono::seconds(60)))
      << "stuck before the failing event";
  // The failure held for a while (retried meanwhile), then lifted: nothing past the
  // failing event was written while it held (a load that slows the retries only makes
  // this weaker, never wrong).
  test::hold_fault_for(std::chrono::seconds(3));
  EXPECT_LE(seqs().size(), 1500u) << "written past the failing event";
  exec("DELETE FROM block");
  ASSERT_TRUE(test::wait_until([&] { return seqs().size() >= 1600; }, std::chrono::seconds(60)))
      << "stuck at the event that failed";
  const std::size_t before_stop = seqs().size();
  ::kill(first, SIGTERM);
  EXPECT_EQ(wait_exit(first), 0);
  ASSERT_TRUE(test::wait_until([&] { return seqs().size() >= before_stop + 400; },
                               std::chrono::seconds(60)))
      << "no waiting instance took over after the stop";
  const std::size_t before_kill = seqs().size();
  ::kill(second, SIGKILL);
  EXPECT_EQ(wait_exit(second), -SIGKILL);
  EXPECT_LT(before_kill, static_cast<std::size_t>(kEvents)) << "killed after the work";
  EXPECT_TRUE(test::wait_until([&] { return seqs().size() >= kEvents; }, std::chrono::seconds(90)))
      << "the waiting instance did not take over: " << seqs().size() << " rows";
  // What the killed one had written but not acked comes again: stored already.
  EXPECT_TRUE(test::wait_until(
      [&] {
        const auto q = rabbit.queue(queue);
        return q.ready + q.unacked == 0;
      },
      std::chrono::seconds(30)));
  ::kill(third, SIGTERM);
  EXPECT_EQ(wait_exit(third), 0);
  const auto stored = seqs();
  std::vector<long> expected(kEvents);
  std::iota(expected.begin(), expected.end(), 0L);
  EXPECT_EQ(stored, expected) << "out of order, lost or twice";
  std::filesystem::remove(path);
}

// A quorum queue with x-delivery-limit 3 under `sluice run` (source.rabbitmq.delivery_limit
// 3, dead_letter_exchange: true): a record the database fails every time is refused by
// Sluice on its 4th delivery (sink.max_record_failures lowered from 5 to the broker's
// limit + 1), so the rejects table has it with its reason and the broker dead-letters it
// as Sluice's reject ("rejected"), not for its delivery limit; the others are written,
// nothing loops.
TEST_F(OperationsPipeline, RabbitMqDeliveryLimitLetsSluiceRejectAFailingRecordFirst) {
  auto& rabbit = test::RabbitMq::shared();
  const std::string queue = "ops-limit-" + std::to_string(getpid()), dlq = queue + "-dlq";
  create_and_publish(queue, "--quorum --delivery-limit 3 --dead-letter-queue " + dlq, 20, "l");
  ASSERT_TRUE(
      test::wait_until([&] { return rabbit.queue(queue).ready == 20; }, std::chrono::seconds(10)));
  db_ = ::testing::TempDir() + "/sluice-ops-limit-" + std::to_string(getpid()) + ".db";
  test::remove_sqlite(db_);
  {
    // The sink's table, made first, with a trigger that fails event 7 every time: abs()
    // of the least integer is a runtime error (SQLITE_ERROR: transient, never refused).
    sqlite3* handle = nullptr;
    ASSERT_EQ(sqlite3_open(db_.c_str(), &handle), SQLITE_OK);
    char* error = nullptr;
    EXPECT_EQ(sqlite3_exec(handle,
                           "CREATE TABLE records (hash TEXT NOT NULL, message_id TEXT, document "
                           "TEXT NOT NULL, written_at TEXT NOT NULL DEFAULT "
                           "(strftime('%Y-%m-%dT%H:%M:%fZ','now')));"
                           "CREATE TRIGGER fail_7 BEFORE INSERT ON records WHEN "
                           "json_extract(NEW.document, '$.seq') = 7 "
                           "BEGIN SELECT abs(-9223372036854775807 - 1); END;",
                           nullptr, nullptr, &error),
              SQLITE_OK)
        << error;
    sqlite3_free(error);
    sqlite3_close(handle);
  }
  const auto cfg = app::parse_config(
      "source:\n  type: rabbitmq\n  failure_backoff: 50ms\n  failure_backoff_max: 200ms\n"
      "  rabbitmq:\n    url: " +
      rabbit.uri() + "\n    queue: " + queue +
      "\n    delivery_limit: 3\n    dead_letter_exchange: true\n"
      "sink:\n  type: sqlite\n  max_attempts: 1\n  sqlite:\n    path: " +
      db_ +
      "\nmetrics:\n  listen: 127.0.0.1:0\nlogging:\n  level: warn\n"
      "normalize:\n  fields:\n"
      "    - {name: id, from: /id, type: string, required: true}\n"
      "    - {name: seq, from: /seq, type: integer, required: true}\n"
      "identity:\n  versions:\n    V1: [id]\n");
  EXPECT_EQ(cfg.writer.max_record_failures, 4);
  const auto summary = run_until_drained(cfg);
  EXPECT_EQ(summary.records_in_sink, 19u);
  EXPECT_EQ(summary.rejected_sink_refused, 1u);
  {
    sqlite3* handle = nullptr;
    ASSERT_EQ(sqlite3_open_v2(db_.c_str(), &handle, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
    sqlite3_stmt* statement = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(handle, "SELECT reason, detail, body FROM rejects", -1, &statement,
                                 nullptr),
              SQLITE_OK);
    ASSERT_EQ(sqlite3_step(statement), SQLITE_ROW);
    const auto column = [&](int i) {
      return std::string(reinterpret_cast<const char*>(sqlite3_column_text(statement, i)));
    };
    EXPECT_EQ(column(0), "sink_refused");
    EXPECT_NE(column(1).find("overflow"), std::string::npos) << column(1);
    EXPECT_NE(column(2).find("\"seq\":7"), std::string::npos) << column(2);
    EXPECT_EQ(sqlite3_step(statement), SQLITE_DONE) << "one reject";
    sqlite3_finalize(statement);
    sqlite3_close(handle);
  }
  const auto dead =
      test::run_with_status("/usr/bin/python3 " + std::string(SLUICE_SOURCE_DIR) +
                            "/tests/tools/pika_dead_letters.py '" + rabbit.uri() + "' " + dlq);
  EXPECT_NE(dead.second.find(" rejected:" + queue + ":1\n"), std::string::npos) << dead.second;
  EXPECT_EQ(dead.second.find("delivery_limit"), std::string::npos) << dead.second;
  EXPECT_EQ(std::count(dead.second.begin(), dead.second.end(), '\n'), 1) << dead.second;
  // A quorum queue's counts reach rabbitmqctl a moment later.
  EXPECT_TRUE(test::wait_until(
      [&] {
        const auto q = rabbit.queue(queue);
        return q.ready + q.unacked == 0;
      },
      std::chrono::seconds(10)));
}

// A stream read from its first offset by `sluice run`, killed (-9) twice mid-run: each
// restart resumes after the offset saved in the database with the rows (not from the
// first, never past a row not written), and the table ends with each of the 50,000
// records once. The broker delivers again only what came after the saved offset.
TEST_F(OperationsPipeline, RabbitMqStreamResumesAfterItsSavedOffsetWhenKilled) {
  auto& rabbit = test::RabbitMq::shared();
  const std::string queue = "ops-stream-" + std::to_string(getpid());
  const std::string bin = SLUICE_BINARY;
  constexpr int kEvents = 50000;
  create_and_publish(queue, "--stream", kEvents, "t");
  db_ = ::testing::TempDir() + "/sluice-ops-stream-" + std::to_string(getpid()) + ".db";
  test::remove_sqlite(db_);
  const std::string path = ::testing::TempDir() + "/sluice-ops-stream.yaml";
  const std::string log = ::testing::TempDir() + "/sluice-ops-stream.log";
  std::filesystem::remove(log);
  std::ofstream(path) << "source:\n  type: rabbitmq\n  max_messages_per_second: 4000\n"
                      << "  rabbitmq:\n    url: " << rabbit.uri() << "\n    queue: " << queue
                      << "\n    stream_offset: first\n    prefetch: 500\n"
                      << "sink:\n  type: sqlite\n  sqlite:\n    path: " << db_ << "\n"
                      << "metrics:\n  listen: 127.0.0.1:0\nlogging:\n  level: info\n"
                      << "normalize:\n  fields:\n"
                      << "    - {name: id, from: /id, type: string, required: true}\n"
                      << "    - {name: seq, from: /seq, type: integer, required: true}\n"
                      << "identity:\n  versions:\n    V1: [id]\n";
  auto query = [&](const std::string& sql) -> long {
    long value = -1;
    sqlite3* handle = nullptr;
    if (sqlite3_open_v2(db_.c_str(), &handle, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
      sqlite3_busy_timeout(handle, 2000);
      sqlite3_stmt* statement = nullptr;
      if (sqlite3_prepare_v2(handle, sql.c_str(), -1, &statement, nullptr) == SQLITE_OK &&
          sqlite3_step(statement) == SQLITE_ROW)
        value = sqlite3_column_int64(statement, 0);
      sqlite3_finalize(statement);
    }
    sqlite3_close(handle);
    return value;  // -1: no table (yet), no row
  };
  auto rows = [&] { return query("SELECT count(*) FROM records"); };
  // The further of the source's own and the one saved with the rows: where a restart
  // resumes.
  auto saved = [&] { return query("SELECT max(CAST(position AS INTEGER)) FROM sluice_positions"); };
  // Where each run's consumer started, from its log: "first" or an offset.
  auto starts = [&] {
    std::vector<std::string> out;
    std::ifstream in(log);
    const std::string marker = "event=stream_consumer_started";
    for (std::string line; std::getline(in, line);)
      if (line.find(marker) != std::string::npos) {
        const auto at = line.find("from=\"");
        out.push_back(line.substr(at + 6, line.find('"', at + 6) - at - 6));
      }
    return out;
  };
  auto spawn = [&] {
    return test::spawn_quiet(
        {"/bin/sh", "-c", "exec " + bin + " run --config " + path + " 2>>" + log});
  };
  std::vector<long> resumed_at;
  for (const long kill_at : {12000L, 30000L}) {
    const pid_t run = spawn();
    ASSERT_TRUE(test::wait_until([&] { return rows() >= kill_at; }, std::chrono::seconds(120)))
        << "stuck at " << rows() << " rows";
    ::kill(run, SIGKILL);
    EXPECT_EQ(wait_exit(run), -SIGKILL);
    const long written = rows(), position = saved();
    EXPECT_LT(written, kEvents) << "killed after the work";
    // Saved after the rows it covers were written: never ahead of them.
    ASSERT_GE(position, 0) << "no position saved in " << written << " rows";
    EXPECT_LT(position, written);
    resumed_at.push_back(position + 1);
    RecordProperty("rows_at_kill_" + std::to_string(kill_at), std::to_string(written));
    RecordProperty("saved_at_kill_" + std::to_string(kill_at), std::to_string(position));
  }
  const pid_t last = spawn();
  EXPECT_TRUE(test::wait_until([&] { return rows() >= kEvents; }, std::chrono::seconds(120)))
      << rows() << " rows";
  // Its position reaches the stream's end (saved about every second).
  EXPECT_TRUE(test::wait_until([&] { return saved() == kEvents - 1; }, std::chrono::seconds(10)))
      << "saved " << saved();
  ::kill(last, SIGTERM);
  EXPECT_EQ(wait_exit(last), 0);
  const auto from = starts();
  ASSERT_EQ(from.size(), 3u) << "one consumer per run";
  EXPECT_EQ(from[0], "first");
  // The restarts resumed after the saved offsets (the broker delivered nothing before).
  EXPECT_EQ(from[1], std::to_string(resumed_at[0]));
  EXPECT_EQ(from[2], std::to_string(resumed_at[1]));
  EXPECT_EQ(rows(), kEvents);
  EXPECT_EQ(query("SELECT count(DISTINCT json_extract(document, '$.seq')) FROM records"), kEvents);
  EXPECT_EQ(query("SELECT min(json_extract(document, '$.seq')) FROM records"), 0);
  EXPECT_EQ(query("SELECT max(json_extract(document, '$.seq')) FROM records"), kEvents - 1);
  std::filesystem::remove(path);
  std::filesystem::remove(log);
}

// A stream into PostgreSQL killed (-9) mid-run: each batch committed the stream's offset
// with its rows, so the position is exactly the last row's offset, and the restart reads
// exactly what came after: no duplicate, each record written once across the two runs.
TEST_F(OperationsPipeline, RabbitMqStreamOffsetIsCommittedWithItsRowsInPostgres) {
  auto& pg = test::Postgres::shared();
  const std::string queue = "ops-stream-rows-" + std::to_string(getpid());
  const std::string table = "stream_rows_" + std::to_string(getpid());
  constexpr long kEvents = 20000;
  create_and_publish(queue, "--stream", kEvents, "r");
  const std::string dir = ::testing::TempDir() + "/ops-stream-rows-" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/stream.yaml", log = dir + "/log.txt", out = dir + "/out.txt";
  // The defaults (two writers, handlers inline): messages reach the writers in order.
  std::ofstream(path) << "source:\n  type: rabbitmq\n  max_messages_per_second: 4000\n"
                      << "  rabbitmq:\n    url: " << test::RabbitMq::shared().uri()
                      << "\n    queue: " << queue
                      << "\n    stream_offset: first\n    prefetch: 500\n"
                      << "sink:\n  type: postgres\n  table: " << table
                      << "\n  rejects_table: " << table
                      << "_rejects\n  postgres:\n    dsn: " << pg.dsn() << "\n"
                      << "metrics:\n  listen: 127.0.0.1:0\nlogging:\n  level: info\n"
                      << "normalize:\n  fields:\n"
                      << "    - {name: id, from: /id, type: string, required: true}\n"
                      << "    - {name: seq, from: /seq, type: integer, required: true}\n"
                      << "identity:\n  versions:\n    V1: [id]\n";
  const auto number = test::postgres_number;
  auto rows = [&] { return number("SELECT count(*) FROM " + table); };
  auto position = [&](const std::string& suffix) {
    return number("SELECT position FROM sluice_positions WHERE key LIKE 'rabbitmq vhost=% queue=" +
                  queue + " pipeline=default" + suffix + "'");
  };
  const int null_fd = ::open("/dev/null", O_RDONLY);
  const int log_fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const pid_t killed =
      test::spawn_child({SLUICE_BINARY, "run", "--config", path}, null_fd, null_fd, log_fd);
  ASSERT_TRUE(test::wait_until([&] { return rows() >= 6000; }, std::chrono::seconds(60)))
      << "stuck at " << rows() << " rows";
  ::kill(killed, SIGKILL);
  EXPECT_EQ(wait_exit(killed), -SIGKILL);
  const long written = rows();
  EXPECT_LT(written, kEvents) << "killed mid-run";
  EXPECT_EQ(position("#rows"), written - 1) << "offsets from 0: the last row's";
  EXPECT_LE(position(""), written - 1) << "the source's own, saved apart, never ahead";

  const int out_fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const pid_t restarted =
      test::spawn_child({SLUICE_BINARY, "run", "--config", path}, null_fd, out_fd, log_fd);
  ::close(null_fd);
  ::close(out_fd);
  ::close(log_fd);
  EXPECT_TRUE(test::wait_until([&] { return rows() >= kEvents; }, std::chrono::seconds(60)))
      << rows() << " rows";
  // Settled to the stream's end before the stop: nothing redelivered is handled twice.
  EXPECT_TRUE(
      test::wait_until([&] { return position("#rows") == kEvents - 1; }, std::chrono::seconds(10)));
  ::kill(restarted, SIGTERM);
  EXPECT_EQ(wait_exit(restarted), 0);
  std::ifstream in(out);
  const std::string summary((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto figure = [&](const std::string& label) {
    const auto at = summary.find("\n  " + label + " ");
    return at == std::string::npos
               ? -1L
               : std::stol(summary.substr(summary.find_first_not_of(' ', at + 3 + label.size())));
  };
  EXPECT_EQ(figure("received"), kEvents - written) << summary;
  EXPECT_EQ(figure("written (new)"), kEvents - written) << summary;
  EXPECT_EQ(figure("duplicates"), 0) << summary;
  std::ifstream log_in(log);
  const std::string log_text((std::istreambuf_iterator<char>(log_in)),
                             std::istreambuf_iterator<char>());
  EXPECT_NE(log_text.find("from=\"" + std::to_string(written) + "\""), std::string::npos)
      << "the restart's consumer started after the last row\n"
      << log_text;
  EXPECT_EQ(rows(), kEvents);
  EXPECT_EQ(number("SELECT count(DISTINCT document->>'seq') FROM " + table), kEvents);
  pg.query("DROP TABLE " + table + "; DROP TABLE " + table + "_rejects; DELETE FROM " +
           "sluice_positions WHERE key LIKE 'rabbitmq vhost=% queue=" + queue + " %'");
  std::filesystem::remove_all(dir);
}

// The same with four worker threads and four writers: batches reach the writers out of
// the stream's order, so the offset saved with the rows may lag them, but never passes a
// row not written: at the kill every offset up to it has its row. The restart then ends
// with each record once.
TEST_F(OperationsPipeline, RabbitMqStreamOffsetNeverPassesARowNotWrittenWithWorkersAndWriters) {
  auto& pg = test::Postgres::shared();
  const std::string queue = "ops-stream-order-" + std::to_string(getpid());
  const std::string table = "stream_order_" + std::to_string(getpid());
  constexpr long kEvents = 20000;
  create_and_publish(queue, "--stream", kEvents, "o");
  const std::string dir = ::testing::TempDir() + "/ops-stream-order-" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/stream.yaml";
  std::ofstream(path) << "source:\n  type: rabbitmq\n  max_messages_per_second: 4000\n"
                      << "  worker_threads: 4\n"
                      << "  rabbitmq:\n    url: " << test::RabbitMq::shared().uri()
                      << "\n    queue: " << queue
                      << "\n    stream_offset: first\n    prefetch: 500\n"
                      << "sink:\n  type: postgres\n  writers: 4\n  batch_size: 20\n  table: "
                      << table << "\n  rejects_table: " << table
                      << "_rejects\n  postgres:\n    dsn: " << pg.dsn() << "\n"
                      << "metrics:\n  listen: 127.0.0.1:0\nlogging:\n  level: warn\n"
                      << "normalize:\n  fields:\n"
                      << "    - {name: id, from: /id, type: string, required: true}\n"
                      << "    - {name: seq, from: /seq, type: integer, required: true}\n"
                      << "identity:\n  versions:\n    V1: [id]\n";
  const auto number = test::postgres_number;
  auto rows = [&] { return number("SELECT count(*) FROM " + table); };
  const std::string key = "rabbitmq vhost=% queue=" + queue + " pipeline=default#rows";
  const pid_t killed = spawn_sluice({"run", "--config", path});
  ASSERT_TRUE(test::wait_until([&] { return rows() >= 6000; }, std::chrono::seconds(60)))
      << "stuck at " << rows() << " rows";
  ::kill(killed, SIGKILL);
  EXPECT_EQ(wait_exit(killed), -SIGKILL);
  const long position =
      number("SELECT position FROM sluice_positions WHERE key LIKE '" + key + "'");
  ASSERT_GE(position, 0) << "no position saved with the rows";
  EXPECT_LT(position, kEvents - 1) << "killed mid-run";
  EXPECT_EQ(number("SELECT count(*) FROM " + table +
                   " WHERE (document->>'seq')::bigint <= " + std::to_string(position)),
            position + 1)
      << "every offset up to the one saved has its row";
  const pid_t restarted = spawn_sluice({"run", "--config", path});
  EXPECT_TRUE(test::wait_until([&] { return rows() >= kEvents; }, std::chrono::seconds(60)))
      << rows() << " rows";
  ::kill(restarted, SIGTERM);
  EXPECT_EQ(wait_exit(restarted), 0);
  EXPECT_EQ(rows(), kEvents);
  EXPECT_EQ(number("SELECT count(DISTINCT document->>'seq') FROM " + table), kEvents);
  pg.query("DROP TABLE " + table + "; DROP TABLE " + table + "_rejects; DELETE FROM " +
           "sluice_positions WHERE key LIKE 'rabbitmq vhost=% queue=" + queue + " %'");
  std::filesystem::remove_all(dir);
}

// Redrive's guards on RabbitMQ, from a review: messages equal but for a header, one
// routed and one returned by a headers exchange, each settled as the broker did (the
// returned one stays); a redrive into a queue that dead-letters straight back (TTL 0)
// moves each message once and ends; a dead letter whose x-death is not what the broker
// writes is shown, not fatal.
TEST_F(OperationsPipeline, RabbitMqRedriveKeepsWhatTheBrokerReturnsAndEnds) {
  auto& rabbit = test::RabbitMq::shared();
  amqp::ConnectionOptions o;
  o.uri = amqp::parse_uri(rabbit.uri());
  amqp::Connection admin(o);
  admin.open_channel(1);
  const std::string tag = std::to_string(getpid());
  const std::string dlq = "ops-rg-dlq-" + tag, routed = "ops-rg-routed-" + tag,
                    exchange = "ops-rg-headers-" + tag, bounce = "ops-rg-bounce-" + tag;
  admin.declare_queue(1, dlq);
  admin.declare_queue(1, routed);
  amqp_exchange_declare(admin.raw(), 1, amqp_cstring_bytes(exchange.c_str()),
                        amqp_cstring_bytes("headers"), 0, 0, 1, 0, amqp_empty_table);
  admin.check_reply("exchange.declare");
  amqp_table_entry_t match[2];
  match[0].key = amqp_cstring_bytes("x-match");
  match[0].value.kind = AMQP_FIELD_KIND_UTF8;
  match[0].value.value.bytes = amqp_cstring_bytes("all");
  match[1].key = amqp_cstring_bytes("route");
  match[1].value.kind = AMQP_FIELD_KIND_UTF8;
  match[1].value.value.bytes = amqp_cstring_bytes("yes");
  amqp_queue_bind(admin.raw(), 1, amqp_cstring_bytes(routed.c_str()),
                  amqp_cstring_bytes(exchange.c_str()), amqp_cstring_bytes(""),
                  amqp_table_t{2, match});
  admin.check_reply("queue.bind");
  // Ten equal bodies without a message id, route=yes and route=no in turn.
  auto publish_raw = [&](const std::string& queue, const std::string& body, const char* key,
                         const char* value) {
    amqp_table_entry_t header{};
    header.key = amqp_cstring_bytes(key);
    header.value.kind = AMQP_FIELD_KIND_UTF8;
    header.value.value.bytes = amqp_cstring_bytes(value);
    amqp_basic_properties_t p{};
    p._flags = AMQP_BASIC_HEADERS_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG;
    p.delivery_mode = 2;
    p.headers = {1, &header};
    ASSERT_EQ(amqp_basic_publish(admin.raw(), 1, amqp_cstring_bytes(""),
                                 amqp_cstring_bytes(queue.c_str()), 0, 0, &p,
                                 amqp_cstring_bytes(body.c_str())),
              AMQP_STATUS_OK);
  };
  for (int i = 0; i < 10; ++i)
    publish_raw(dlq, R"({"event":"ping"})", "route", i % 2 ? "no" : "yes");
  ASSERT_TRUE(
      test::wait_until([&] { return rabbit.queue(dlq).ready == 10; }, std::chrono::seconds(10)));
  const std::string bin = SLUICE_BINARY, url = " --amqp-url '" + rabbit.uri() + "'";
  const auto headers = test::run_with_status(bin + " dlq redrive --to-exchange " + exchange + url +
                                             " --queue " + dlq + " 2>&1");
  EXPECT_EQ(headers.first, 1) << headers.second;
  EXPECT_NE(headers.second.find("5 moved, 5 failed"), std::string::npos) << headers.second;
  EXPECT_EQ(rabbit.queue(routed).ready, 5);
  EXPECT_EQ(rabbit.queue(dlq).ready, 5);
  const auto left = test::run_with_status(bin + " dlq peek --json --max 10" + url + " --queue " +
                                          dlq + " 2>/dev/null");
  EXPECT_EQ(std::count(left.second.begin(), left.second.end(), '\n'), 5) << left.second;
  for (std::size_t at = 0, end; (end = left.second.find('\n', at)) != std::string::npos;
       at = end + 1)
    EXPECT_EQ(nlohmann::json::parse(left.second.substr(at, end - at))["headers"]["route"], "no")
        << "the returned ones stayed, none of the routed ones";

  // A queue whose messages die at once, back into the dead-letter queue.
  {
    amqp_table_entry_t arguments[3];
    arguments[0].key = amqp_cstring_bytes("x-message-ttl");
    arguments[0].value.kind = AMQP_FIELD_KIND_I32;
    arguments[0].value.value.i32 = 0;
    arguments[1].key = amqp_cstring_bytes("x-dead-letter-exchange");
    arguments[1].value.kind = AMQP_FIELD_KIND_UTF8;
    arguments[1].value.value.bytes = amqp_cstring_bytes("");
    arguments[2].key = amqp_cstring_bytes("x-dead-letter-routing-key");
    arguments[2].value.kind = AMQP_FIELD_KIND_UTF8;
    arguments[2].value.value.bytes = amqp_cstring_bytes(dlq.c_str());
    amqp_queue_declare(admin.raw(), 1, amqp_cstring_bytes(bounce.c_str()), 0, 0, 0, 1,
                       amqp_table_t{3, arguments});
    admin.check_reply("queue.declare");
  }
  const auto bounced = test::run_with_status("timeout 60 " + bin + " dlq redrive --to " + bounce +
                                             url + " --queue " + dlq + " 2>&1");
  EXPECT_EQ(bounced.first, 0) << bounced.second;
  EXPECT_NE(bounced.second.find("5 moved, 0 failed"), std::string::npos) << bounced.second;
  EXPECT_NE(bounced.second.find("ended after the 5 dead letters there were at the start"),
            std::string::npos)
      << bounced.second;

  // x-death as a producer may forge it: numbers where the broker writes strings.
  {
    amqp_table_entry_t fields[2];
    fields[0].key = amqp_cstring_bytes("reason");
    fields[0].value.kind = AMQP_FIELD_KIND_I32;
    fields[0].value.value.i32 = 5;
    fields[1].key = amqp_cstring_bytes("queue");
    fields[1].value.kind = AMQP_FIELD_KIND_I32;
    fields[1].value.value.i32 = 7;
    amqp_field_value_t death{};
    death.kind = AMQP_FIELD_KIND_TABLE;
    death.value.table = {2, fields};
    amqp_table_entry_t header{};
    header.key = amqp_cstring_bytes("x-death");
    header.value.kind = AMQP_FIELD_KIND_ARRAY;
    header.value.value.array = {1, &death};
    amqp_basic_properties_t p{};
    p._flags = AMQP_BASIC_HEADERS_FLAG;
    p.headers = {1, &header};
    ASSERT_EQ(
        amqp_basic_publish(admin.raw(), 1, amqp_cstring_bytes(""), amqp_cstring_bytes(dlq.c_str()),
                           0, 0, &p, amqp_cstring_bytes("{}")),
        AMQP_STATUS_OK);
  }
  ASSERT_TRUE(
      test::wait_until([&] { return rabbit.queue(dlq).ready == 6; }, std::chrono::seconds(10)))
      << "the 5 that bounced are back, and the forged one";
  const auto forged = test::run_with_status(bin + " dlq stats" + url + " --queue " + dlq + " 2>&1");
  EXPECT_EQ(forged.first, 0) << forged.second;
  EXPECT_NE(forged.second.find("expired  5"), std::string::npos) << forged.second;
  EXPECT_NE(forged.second.find("(none: not dead-lettered by the broker)  1"), std::string::npos)
      << forged.second;
  for (const auto& name : {dlq, routed, bounce}) admin.delete_queue(1, name);

  // A quorum dead-letter queue counts each look as a delivery: the second look warns.
  const std::string quorum = "ops-rg-quorum-" + tag, quorum_dlq = quorum + "-dlq";
  test::run_command(bin + " queue create --quorum" + url + " --name " + quorum +
                    " --dead-letter-queue " + quorum_dlq + " 2>&1");
  publish_raw(quorum_dlq, "{}", "route", "yes");
  ASSERT_TRUE(test::wait_until([&] { return rabbit.queue(quorum_dlq).ready == 1; },
                               std::chrono::seconds(10)));
  const std::string look = bin + " dlq peek" + url + " --queue " + quorum_dlq + " 2>&1";
  const auto first_look = test::run_with_status(look);
  EXPECT_EQ(first_look.second.find("counts deliveries"), std::string::npos) << first_look.second;
  const auto second_look = test::run_with_status(look);
  EXPECT_NE(second_look.second.find("this queue counts deliveries (x-delivery-count"),
            std::string::npos)
      << second_look.second;
  for (const auto& name : {quorum, quorum_dlq}) admin.delete_queue(1, name);
}

// Three pipelines in one process, one file: an SQS standard queue and an SQS FIFO queue
// into SQLite files of their own, a RabbitMQ queue into PostgreSQL; the normalize and
// identity keys written once, beside `pipelines:`. Each ends with exactly its distinct
// records; one metrics server labels each series with its pipeline; --until-drained
// waited for all three.
TEST_F(OperationsPipeline, ThreePipelinesInOneProcessEachEndExact) {
  auto& pg = test::Postgres::shared();
  auto& rabbit = test::RabbitMq::shared();
  const std::string standard = make_queue("ops-multi");
  const auto standard_events = publish(standard, 1500, 0.2, 0.0, 31);
  const auto fifo_events = app::generate_events(600, 0.2, 0.0, 32);
  const auto rabbit_events = app::generate_events(1200, 0.2, 0.0, 33);
  const std::string fifo_name = test::unique_queue_name("ops-multi") + ".fifo";
  test::run(io_, client_->create_queue(fifo_name, {{"FifoQueue", "true"}}));
  const std::string fifo = test::Emulator::shared().queue_url(fifo_name);
  {
    std::vector<sqs::SendMessageEntry> entries;
    for (std::size_t i = 0; i < fifo_events.bodies.size(); ++i) {
      sqs::SendMessageEntry e;
      e.body = fifo_events.bodies[i];
      e.message_group_id = "g" + std::to_string(i % 20);
      e.message_deduplication_id = "m" + std::to_string(i);
      entries.push_back(std::move(e));
    }
    sqs::Publisher publisher(client_, fifo);
    for (const auto& o : test::run(io_, publisher.send_batch(std::move(entries))))
      EXPECT_TRUE(o.ok) << o.error_message;
  }
  const std::string queue = "ops-multi-" + std::to_string(getpid());
  const std::string bin = SLUICE_BINARY;
  test::run_command(bin + " queue create --amqp-url '" + rabbit.uri() + "' --name " + queue);
  const std::string lines = ::testing::TempDir() + "/ops-multi-rabbit.jsonl";
  {
    std::ofstream out(lines);
    for (const auto& body : rabbit_events.bodies) out << body << "\n";
  }
  test::run_command(bin + " publish --amqp-url '" + rabbit.uri() + "' --routing-key " + queue +
                    " --file " + lines + " 2>&1");
  const std::string table = "ops_multi_" + std::to_string(getpid());
  const std::string db_a = ::testing::TempDir() + "/ops-multi-a.db",
                    db_b = ::testing::TempDir() + "/ops-multi-b.db";
  test::remove_sqlite(db_a);
  test::remove_sqlite(db_b);
  const std::string sqs = "        endpoint_url: " + test::Emulator::shared().endpoint() +
                          "\n        region: us-east-1\n        poll_wait: 1s\n";
  const std::string yaml =
      "metrics:\n  listen: 127.0.0.1:0\nlogging:\n  level: warn\n" +
      std::string(test::kInventoryNormalizeYaml) +
      "sink:\n  type: sqlite\n"
      "pipelines:\n"
      "  standard:\n    source:\n      sqs:\n        queue_url: " +
      standard + "\n" + sqs + "    sink:\n      sqlite:\n        path: " + db_a +
      "\n"
      "  fifo:\n    source:\n      sqs:\n        queue_url: " +
      fifo + "\n" + sqs + "    sink:\n      sqlite:\n        path: " + db_b +
      "\n"
      "  orders:\n    source:\n      type: rabbitmq\n      rabbitmq:\n        url: " +
      rabbit.uri() + "\n        queue: " + queue +
      "\n"
      "    sink:\n      type: postgres\n      table: " +
      table + "\n      postgres:\n        dsn: " + pg.dsn() + "\n";
  const auto configs = app::parse_pipelines(yaml);
  ASSERT_EQ(configs.size(), 3u);
  app::RunOptions options;
  options.until_drained = true;
  options.drained_for = std::chrono::milliseconds(1500);
  options.quiet = true;
  std::vector<app::RunSummary> summaries;
  ASSERT_EQ(app::run_pipelines(configs, options, summaries), 0);
  ASSERT_EQ(summaries.size(), 3u);
  std::map<std::string, app::RunSummary> by_name;
  for (const auto& s : summaries) by_name[s.name] = s;
  EXPECT_EQ(by_name["standard"].records_in_sink, standard_events.distinct_records);
  EXPECT_EQ(by_name["standard"].received, standard_events.bodies.size());
  EXPECT_EQ(by_name["fifo"].records_in_sink, fifo_events.distinct_records);
  EXPECT_EQ(by_name["orders"].records_in_sink, rabbit_events.distinct_records);
  EXPECT_EQ(pg.query("SELECT count(*) FROM " + table),
            std::to_string(rabbit_events.distinct_records) + "\n");
  EXPECT_EQ(queue_total(standard), 0);
  EXPECT_EQ(queue_total(fifo), 0);
  EXPECT_EQ(rabbit.queue(queue).ready, 0);
  test::remove_sqlite(db_a);
  test::remove_sqlite(db_b);
}

// The loader's rules for several pipelines: the process's keys at the top only, a
// pipeline's variables refused, one SQLite file each; config check shows every one.
TEST(OperationsPipelineConfig, SeveralPipelinesMistakesAreRefused) {
  const std::string base =
      "normalize:\n  fields:\n    - {name: a, from: /a}\nidentity:\n  versions:\n    V1: [a]\n";
  const auto error = [](const std::string& yaml) {
    try {
      app::parse_pipelines(yaml, "f.yaml");
    } catch (const app::ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const std::string one =
      "  a:\n    source:\n      sqs:\n        queue_url: http://127.0.0.1:1/0/a\n";
  const std::string two =
      "  b:\n    source:\n      sqs:\n        queue_url: http://127.0.0.1:1/0/b\n";
  EXPECT_EQ(error(base + "pipelines:\n" + one + two),
            "f.yaml: pipelines.b.sink.sqlite.path: sluice.db is pipeline a's too: give each "
            "pipeline its own SQLite file (one writer each)");
  EXPECT_EQ(error(base + "pipelines:\n" + one + "    metrics:\n      listen: 127.0.0.1:0\n"),
            "f.yaml: pipelines.a.metrics: the process has one: set metrics at the top level, "
            "beside pipelines");
  EXPECT_EQ(error(base + "pipelines:\n" + one + "    name: x\n"),
            "f.yaml: pipelines.a.name: a pipeline's name is its key under pipelines");
  EXPECT_EQ(error(base + "pipelines: []\n"),
            "f.yaml: pipelines: expected a mapping of each pipeline's name to its keys (source, "
            "normalize, identity, filter, sink, ...)");
  EXPECT_TRUE(error(base + "pipelines:\n  \"bad name\":\n    source:\n      sqs:\n        "
                           "queue_url: http://127.0.0.1:1/0/a\n")
                  .starts_with("f.yaml: pipelines.bad name: name: got 'bad name'"));
  // The process's keys, dotted too; a name given twice; one queue or file twice.
  EXPECT_EQ(error(base + "pipelines:\n" + one + "    metrics.listen: 127.0.0.1:0\n"),
            "f.yaml: pipelines.a.metrics.listen: the process has one: set metrics.listen at the "
            "top level, beside pipelines");
  EXPECT_EQ(error(base + "pipelines:\n" + one + "    logging:\n      level: debug\n"),
            "f.yaml: pipelines.a.logging.level: the process has one: set logging.level at the "
            "top level, beside pipelines");
  EXPECT_NE(error(base + "pipelines:\n" + one + "    logging: 5\n"), "accepted");
  EXPECT_EQ(error(base + "pipelines:\n" + one + one),
            "f.yaml: pipelines.a: given twice (a pipeline's name is its key: one each)");
  EXPECT_EQ(error(base + "pipelines:\n" + one + "    sink:\n      sqlite:\n        path: x.db\n" +
                  "  b:\n    source:\n      sqs:\n        queue_url: http://127.0.0.1:1/0/a\n"),
            "f.yaml: pipelines.b.source: http://127.0.0.1:1/0/a is pipeline a's queue too: two "
            "pipelines would split its messages between them");
  EXPECT_EQ(error(base + "pipelines:\n" + one + "    sink:\n      sqlite:\n        path: x.db\n" +
                  two + "    sink:\n      sqlite:\n        path: ./x.db\n"),
            "f.yaml: pipelines.b.sink.sqlite.path: ./x.db is pipeline a's too: give each pipeline "
            "its own SQLite file (one writer each)");
  // Shared keys of one source do not break a pipeline of another.
  const auto mixed = app::parse_pipelines(
      base + "source:\n  sqs:\n    poll_wait: 2s\npipelines:\n" + one +
      "  r:\n    source:\n      type: rabbitmq\n      rabbitmq:\n        queue: q\n"
      "    sink:\n      sqlite:\n        path: r.db\n");
  ASSERT_EQ(mixed.size(), 2u);
  EXPECT_EQ(mixed[1].source_driver->name(), "rabbitmq");
  setenv("SLUICE_QUEUE_URL", "http://127.0.0.1:1/0/q", 1);
  EXPECT_EQ(error(base + "pipelines:\n" + one),
            "f.yaml: SLUICE_QUEUE_URL is set, but the file has several pipelines: set "
            "source.sqs.queue_url in each pipeline instead");
  unsetenv("SLUICE_QUEUE_URL");
  // A pipeline's own mapping merges over the shared one, key by key.
  const auto configs = app::parse_pipelines(
      base + "sink:\n  batch_size: 50\n  sqlite:\n    path: shared.db\npipelines:\n" + one +
      "    sink:\n      sqlite:\n        path: a.db\n" + two);
  ASSERT_EQ(configs.size(), 2u);
  EXPECT_EQ(configs[0].name, "a");
  EXPECT_EQ(configs[0].sink_as<sinks::SqliteSettings>().options.path, "a.db");
  EXPECT_EQ(configs[0].writer.batch_size, 50u);
  EXPECT_EQ(configs[1].sink_as<sinks::SqliteSettings>().options.path, "shared.db");
  // sluice config check shows each.
  const std::string path = ::testing::TempDir() + "/ops-two-pipelines.yaml";
  std::ofstream(path) << base + "sink:\n  sqlite:\n    path: shared.db\npipelines:\n" + one +
                             "    sink:\n      sqlite:\n        path: a.db\n" + two;
  const auto check = test::run_with_status(std::string(SLUICE_BINARY) + " config check --config " +
                                           path + " 2>&1");
  EXPECT_EQ(check.first, 0) << check.second;
  EXPECT_NE(check.second.find("pipeline a:\nsource: sqs http://127.0.0.1:1/0/a"), std::string::npos)
      << check.second;
  EXPECT_NE(check.second.find("pipeline b:\nsource: sqs http://127.0.0.1:1/0/b"), std::string::npos)
      << check.second;
  // Two pipelines writing one PostgreSQL rejects table: each row names its pipeline, and
  // `sluice rejects` through one reads only that one's rows.
  auto& pg = test::Postgres::shared();
  const std::string rejects = "shared_rejects_" + std::to_string(getpid());
  std::ofstream(path) << base + "sink:\n  type: postgres\n  rejects_table: " + rejects +
                             "\n  postgres:\n    dsn: " + pg.dsn() + "\npipelines:\n" + one + two;
  {
    const auto shared =
        app::parse_pipelines(base + "sink:\n  type: postgres\n  rejects_table: " + rejects +
                             "\n  postgres:\n    dsn: " + pg.dsn() + "\npipelines:\n" + one + two);
    auto sink = app::sink_factory(shared[0])();
    sink->open();
    sink->write_rejects(
        std::vector<sinks::RejectRow>{{"ma", "malformed", "of a", "{", "q", "", "a"},
                                      {"mb", "malformed", "of b", "{", "q", "", "b"}});
  }
  for (const char* name : {"a", "b"}) {
    const auto list =
        test::run_with_status(std::string(SLUICE_BINARY) + " rejects list --pipeline " + name +
                              " --config " + path + " 2>&1");
    EXPECT_EQ(list.first, 0) << list.second;
    EXPECT_NE(list.second.find(std::string("\tm") + name + "\t"), std::string::npos) << list.second;
    EXPECT_NE(list.second.find("1 row(s)"), std::string::npos)
        << "only pipeline " << name << "'s row: " << list.second;
  }
  pg.query("DROP TABLE " + rejects);
  std::filesystem::remove(path);
}

// Redrive's guards: --to the dead-letter queue itself (by ARN, whatever the spelling),
// a message the destination refuses (given up after two tries, never looped), and
// --filter-reason on a FIFO dead-letter queue (a message left behind holds its group).
TEST_F(OperationsPipeline, RedriveRefusesLoopsAndGivesUpOnRefusedMessages) {
  const std::string small_name = test::unique_queue_name("ops-rsrc");
  test::run(io_, client_->create_queue(small_name, {{"MaximumMessageSize", "1024"}}));
  const std::string source = test::Emulator::shared().queue_url(small_name);
  const std::string dlq = make_queue("ops-rdlq");
  send(dlq, {{R"({"id":"small","type":"t"})", {{"sluice-reject-reason", "validation"}}},
             {R"({"id":"big","pad":")" + std::string(3000, 'x') + R"("})",
              {{"sluice-reject-reason", "validation"}}}});
  const std::string sqs =
      " --endpoint-url " + test::Emulator::shared().endpoint() + " --region us-east-1 --queue-url ";
  const std::string bin = SLUICE_BINARY;
  const auto self =
      test::run_with_status("timeout 20 " + bin + " dlq redrive --to " +
                            std::regex_replace(dlq, std::regex("127\\.0\\.0\\.1"), "localhost") +
                            "/" + sqs + dlq + " 2>&1");
  EXPECT_EQ(self.first, 2) << self.second;
  EXPECT_NE(self.second.find("--to is the dead-letter queue itself"), std::string::npos)
      << self.second;
  EXPECT_EQ(queue_total(dlq), 2);
  const auto refused = test::run_with_status("timeout 60 " + bin + " dlq redrive --to " + source +
                                             sqs + dlq + " 2>&1");
  EXPECT_EQ(refused.first, 1) << refused.second;
  EXPECT_NE(refused.second.find("1 moved, 1 failed"), std::string::npos) << refused.second;
  EXPECT_EQ(queue_total(dlq), 1) << "the refused one stays, visible again";
  EXPECT_EQ(queue_total(source), 1);
  const std::string fifo_name = test::unique_queue_name("ops-rdlq") + ".fifo";
  test::run(io_, client_->create_queue(fifo_name, {{"FifoQueue", "true"}}));
  const auto fifo =
      test::run_with_status(bin + " dlq redrive --filter-reason validation --to " + source + sqs +
                            test::Emulator::shared().queue_url(fifo_name) + " 2>&1");
  EXPECT_EQ(fifo.first, 2) << fifo.second;
  EXPECT_NE(fifo.second.find("on a FIFO dead-letter queue"), std::string::npos) << fifo.second;
}

// SIGTERM stops every pipeline of the process within the shutdown deadline, exit 0,
// with a summary for each.
TEST_F(OperationsPipeline, SigtermStopsEveryPipelineWithinTheDeadline) {
  const std::string first = make_queue("ops-term-a"), second = make_queue("ops-term-b");
  publish(first, 2000, 0.0, 0.0, 51);
  publish(second, 2000, 0.0, 0.0, 52);
  const std::string dir = ::testing::TempDir() + "/ops-term-" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  const std::string sqs = "        endpoint_url: " + test::Emulator::shared().endpoint() +
                          "\n        region: us-east-1\n        poll_wait: 20s\n";
  const std::string path = dir + "/two.yaml";
  std::ofstream(path) << "metrics:\n  listen: 127.0.0.1:0\n"
                      << test::kInventoryNormalizeYaml
                      << "source:\n  shutdown_deadline: 5s\n  max_messages_per_second: 200\n"
                      << "pipelines:\n  a:\n    source:\n      sqs:\n        queue_url: " << first
                      << "\n"
                      << sqs << "    sink:\n      sqlite:\n        path: " << dir
                      << "/a.db\n  b:\n    source:\n      sqs:\n        queue_url: " << second
                      << "\n"
                      << sqs << "    sink:\n      sqlite:\n        path: " << dir << "/b.db\n";
  const std::string out = dir + "/out.txt";
  const int null_fd = ::open("/dev/null", O_RDONLY);
  const int out_fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const pid_t pid = test::spawn_child({SLUICE_BINARY, "run", "--config", path}, null_fd, out_fd, 2);
  ::close(null_fd);
  ::close(out_fd);
  // Both are working (rate-limited: 2,000 take each 10 s), then SIGTERM.
  test::wait_until([&] { return queue_total(first) < 2000 && queue_total(second) < 2000; });
  ASSERT_LT(queue_total(first), 2000);
  ASSERT_LT(queue_total(second), 2000);
  const auto signalled = std::chrono::steady_clock::now();
  ::kill(pid, SIGTERM);
  EXPECT_EQ(wait_exit(pid), 0);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - signalled).count();
  EXPECT_LT(seconds, 5.0) << "within shutdown_deadline, though every receive was a 20 s poll";
  std::ifstream in(out);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("== sluice run summary: pipeline a =="), std::string::npos) << text;
  EXPECT_NE(text.find("== sluice run summary: pipeline b =="), std::string::npos) << text;
  EXPECT_NE(text.find("process CPU"), std::string::npos) << text;
  std::filesystem::remove_all(dir);
}

// Every thread of a run has a name that says what it does (top -H, perf, gdb show it):
// read from /proc while `sluice run` runs.
TEST_F(OperationsPipeline, ThreadsOfARunAreNamed) {
  const std::string url = make_queue("ops-threads");
  send(url, {{R"({"id":"t-1"})", {}}});
  db_ = ::testing::TempDir() + "/sluice-ops-threads-" + std::to_string(getpid()) + ".db";
  test::remove_sqlite(db_);
  const std::string path = ::testing::TempDir() + "/sluice-ops-threads.yaml";
  std::ofstream(path) << "source:\n  worker_threads: 2\n  sqs:\n    queue_url: " << url
                      << "\n    endpoint_url: " << test::Emulator::shared().endpoint()
                      << "\n    region: us-east-1\n    poll_wait: 1s\n"
                      << "sink:\n  type: sqlite\n  sqlite:\n    path: " << db_ << "\n"
                      << "normalize:\n  fields:\n    - {name: id, from: /id, type: string}\n"
                      << "identity:\n  versions:\n    V1: [id]\n"
                      << "metrics:\n  listen: 127.0.0.1:0\n"
                      << "tracing:\n  otlp_endpoint: http://127.0.0.1:" << test::free_port()
                      << "\nlogging:\n  level: error\n";
  const pid_t pid = spawn_sluice({"run", "--config", path});
  const std::set<std::string> expected = {"sluice-io",      "sluice-work-1", "sluice-work-2",
                                          "sluice-write-1", "sluice-http",   "sluice-probe",
                                          "sluice-trace"};
  std::set<std::string> names;
  const auto read_names = [&] {
    names.clear();
    std::error_code ec;
    for (const auto& task :
         std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
      std::ifstream comm(task.path() / "comm");
      std::string name;
      if (std::getline(comm, name)) names.insert(name);
    }
    return std::includes(names.begin(), names.end(), expected.begin(), expected.end());
  };
  const bool all = test::wait_until(read_names);
  ::kill(pid, SIGTERM);
  EXPECT_EQ(wait_exit(pid), 0);
  std::string seen;
  for (const auto& name : names) seen += " " + name;
  EXPECT_TRUE(all) << "threads:" << seen;
  for (const auto& name : names) EXPECT_TRUE(name.starts_with("sluice")) << name;
  test::remove_sqlite(db_);
  std::filesystem::remove(path);
}
