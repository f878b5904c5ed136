// `sluice run` end to end on the real servers: the emulator as the queue, SQLite,
// PostgreSQL and the MongoDB-wire server as sinks. Each test checks the database
// holds exactly the distinct business records that were published.
#include "support/pipeline.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "app/run.hpp"
#include "cli/health.hpp"
#include "cli/publish.hpp"
#include "config/config.hpp"
#include "observe/http_endpoint.hpp"
#include "observe/http_get.hpp"
#include "observe/metrics.hpp"
#include "sinks/sqlite/sqlite_sink.hpp"
#include "sluice/aws/http.hpp"
#include "sluice/sqs/client.hpp"
#include "sluice/sqs/publisher.hpp"
#include "support/emulator.hpp"
#include "support/local_sqs.hpp"
#include "support/process.hpp"
#include "support/run.hpp"
#include "support/wait.hpp"
#include "support/work.hpp"

extern char** environ;
namespace asio = boost::asio;
using namespace sluice;
using namespace std::chrono_literals;

namespace {

std::string pipeline_yaml(const std::string& queue_url, const std::string& sink_section) {
  return "source:\n  sqs:\n    queue_url: " + queue_url +
         "\n    endpoint_url: " + test::Emulator::shared().endpoint() +
         "\n    region: us-east-1\n    poll_wait: 1s\n    delete_flush_interval: 20ms\n"
         "  concurrency: 2-4\n  max_in_flight: 200\n  failure_backoff: 1s\n" +
         test::inventory_stages_yaml() +
         "metrics:\n  listen: 127.0.0.1:0\nlogging:\n  level: warn\n" + sink_section;
}

class PipelineTest : public test::PipelineFixture {
 protected:
  app::GeneratedEvents publish(const std::string& url, int count, double duplicates,
                               double malformed) {
    return PipelineFixture::publish(url, count, duplicates, malformed, 7);
  }
};

}  // namespace

TEST_F(PipelineTest, SqliteHoldsExactlyTheDistinctRecordsAndRejectsAreKept) {
  const std::string url = make_queue("pipe-sqlite");
  const auto events = publish(url, 3000, 0.25, 0.02);
  const std::string db = ::testing::TempDir() + "/sluice-pipe-" + std::to_string(getpid()) + ".db";
  test::remove_sqlite(db);
  const auto config = app::parse_config(
      pipeline_yaml(url, "sink:\n  type: sqlite\n  sqlite:\n    path: " + db + "\n"));
  const auto summary = run_until_drained(config);
  EXPECT_EQ(summary.records_in_sink, events.distinct_records);
  EXPECT_EQ(summary.written, events.distinct_records);
  EXPECT_EQ(summary.received, 3000u);
  EXPECT_EQ(summary.duplicates, 3000u - events.distinct_records - events.malformed);
  EXPECT_EQ(
      summary.rejected_malformed + summary.rejected_validation + summary.rejected_schema_drift,
      events.malformed);
  EXPECT_GT(summary.rejected_malformed, 0u);
  EXPECT_GT(summary.rejected_validation, 0u);
  EXPECT_GT(summary.rejected_schema_drift, 0u);
  EXPECT_EQ(queue_total(url), 0) << "everything acked: written, duplicate, or kept as a reject";
  auto sink = sinks::make_sqlite_sink({db, "records", "rejects", "FULL", 1000ms, {}});
  EXPECT_EQ(sink->count_records(), events.distinct_records);
  test::remove_sqlite(db);
}

TEST_F(PipelineTest, MalformedMessagesGoToTheDeadLetterQueueWithTheirReason) {
  const std::string url = make_queue("pipe-dlq");
  const std::string dlq = make_queue("pipe-dlq-dead");
  const auto events = publish(url, 300, 0.0, 0.1);
  const std::string db = ::testing::TempDir() + "/sluice-dlq-" + std::to_string(getpid()) + ".db";
  test::remove_sqlite(db);
  const auto config = app::parse_config(
      pipeline_yaml(url, "sink:\n  sqlite:\n    path: " + db +
                             "\nsource:\n  sqs:\n    dead_letter_queue_url: " + dlq + "\n"));
  const auto summary = run_until_drained(config);
  EXPECT_EQ(summary.records_in_sink, events.distinct_records);
  std::set<std::string> reasons;
  std::size_t dead = 0;
  for (int guard = 0; guard < 50 && dead < events.malformed; ++guard) {
    sqs::ReceiveMessageRequest r;
    r.queue_url = dlq;
    r.wait_time_seconds = 1;
    for (const auto& m : test::run(io_, client_->receive_message(r))) {
      ++dead;
      const std::string reason = m.message_attributes.at("sluice-reject-reason").string_value;
      reasons.insert(reason.substr(0, reason.find(':')));
      EXPECT_FALSE(m.message_attributes.at("sluice-message-id").string_value.empty());
      test::run(io_, client_->delete_message(dlq, m.receipt_handle));
    }
  }
  EXPECT_EQ(dead, events.malformed);
  EXPECT_EQ(reasons, (std::set<std::string>{"malformed", "schema_drift", "validation"}));
  EXPECT_EQ(queue_total(url), 0);
  test::remove_sqlite(db);
}

TEST_F(PipelineTest, MongoWireSinkHoldsExactlyTheDistinctRecords) {
  const std::string url = make_queue("pipe-mongo");
  const auto events = publish(url, 1500, 0.3, 0.0);
  const std::string collection = "pipe_" + std::to_string(getpid());
  const auto config = app::parse_config(
      pipeline_yaml(url, "sink:\n  type: mongodb\n  table: " + collection +
                             "\n  mongodb:\n    uri: " + test::MongoWire::shared().uri() +
                             "\n    database: sluice_e2e\n    id_from_hash: true\n"));
  const auto summary = run_until_drained(config);
  EXPECT_EQ(summary.records_in_sink, events.distinct_records);
  EXPECT_EQ(summary.duplicates, 1500u - events.distinct_records);
  EXPECT_EQ(queue_total(url), 0);
}

// SQS takes inline messages up to 1 MiB (since 2025): with the defaults, a body of
// exactly 1 MiB is stored, not dead-lettered. One byte more: Sluice's publisher refuses
// it before sending, as SQS would. Sent unchecked (tests/tools/sqs_send_unchecked.py) in
// two-byte characters, fauxqs refuses it as SQS does (it counts bytes) and local-aws-sqs takes it
// (it counts UTF-16 units): the pipeline then rejects it as malformed, both sizes in the
// reason (docs/sqs-servers.md).
TEST_F(PipelineTest, AOneMebibyteBodyIsStoredWithTheDefaultsAndOneByteMoreRejected) {
  const std::string url = make_queue("pipe-1mib");
  constexpr std::size_t kMiB = 1024 * 1024;
  std::vector<sqs::SendMessageEntry> entries;
  entries.push_back({"", test::inventory_event_of_size(kMiB, "BIG"), {}, {}, {}, {}, {}});
  entries.push_back({"", test::inventory_event_of_size(1000, "SMALL"), {}, {}, {}, {}, {}});
  sqs::Publisher publisher(client_, url);
  for (const auto& o : test::run(io_, publisher.send_batch(std::move(entries))))
    ASSERT_TRUE(o.ok) << o.error_message;
  std::vector<sqs::SendMessageEntry> over;
  over.push_back({"", test::inventory_event_of_size(kMiB + 1, "OVER"), {}, {}, {}, {}, {}});
  const auto refused = test::run(io_, publisher.send_batch(std::move(over)));
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_FALSE(refused[0].ok);
  EXPECT_NE(refused[0].error_message.find("1048577"), std::string::npos)
      << refused[0].error_message;
  const std::string body_file =
      ::testing::TempDir() + "/sluice-1mib-" + std::to_string(getpid()) + ".json";
  std::ofstream(body_file) << test::inventory_event_of_size(kMiB + 1, "WIDE", true);
  const auto [sent_code, sent] = test::run_with_status(
      std::string("/usr/bin/python3 ") + SLUICE_SOURCE_DIR + "/tests/tools/sqs_send_unchecked.py " +
      test::Emulator::shared().endpoint() + " " + url + " " + body_file);
  std::filesystem::remove(body_file);
  const bool server_took_it = test::Emulator::server_name() == "local-aws-sqs";
  if (server_took_it) {
    ASSERT_EQ(sent_code, 0) << sent;
  } else {
    EXPECT_EQ(sent_code, 1) << sent;
    EXPECT_NE(sent.find("refused InvalidParameterValue"), std::string::npos) << sent;
    EXPECT_NE(sent.find("Message must be shorter than 1048576 bytes"), std::string::npos) << sent;
  }
  const std::string db = ::testing::TempDir() + "/sluice-1mib-" + std::to_string(getpid()) + ".db";
  test::remove_sqlite(db);
  const auto config = app::parse_config(
      pipeline_yaml(url, "sink:\n  type: sqlite\n  sqlite:\n    path: " + db + "\n"));
  ASSERT_EQ(config.transform.max_body_bytes, kMiB) << "the default";
  const auto summary = run_until_drained(config);
  EXPECT_EQ(summary.received, server_took_it ? 3u : 2u);
  EXPECT_EQ(summary.records_in_sink, 2u);
  EXPECT_EQ(summary.rejected_malformed, server_took_it ? 1u : 0u);
  EXPECT_EQ(queue_total(url), 0);
  EXPECT_EQ(test::run_command("sqlite3 " + db +
                              " \"select count(*) from records where json_extract(document, "
                              "'$.skuId') = 'BIG'\""),
            "1\n");
  if (server_took_it) {
    EXPECT_EQ(
        test::run_command("sqlite3 " + db + " \"select reason || ': ' || detail from rejects\""),
        "malformed: body of 1048577 bytes exceeds max_body_bytes 1048576\n");
  }
  test::remove_sqlite(db);
}

// MongoDB's own types, read back by pymongo (Debian's python3-pymongo, an independent
// client): exact decimals as Decimal128 (their scale kept), timestamps as dates, nested
// ones too; the same events with sink.mongodb.typed_values: false keep the text, and
// the hashes are the same (computed from the canonical text). A decimal beyond
// Decimal128's 34 digits is refused, never rounded.
TEST_F(PipelineTest, MongoDbHoldsDecimal128AndDatesAndTheSameHashes) {
  const std::string url = make_queue("pipe-mongo-types"), text_url = make_queue("pipe-mongo-text");
  std::vector<sqs::SendMessageEntry> entries;
  for (int i = 0; i < 20; ++i)
    entries.push_back({"",
                       R"({"id":"o-)" + std::to_string(i) + R"(","amount":")" + std::to_string(i) +
                           R"(.5","placedAt":"2026-12-07T10:00:0)" + std::to_string(i % 10) +
                           R"(.123456+01:00","net":")" + std::to_string(i) + R"(e-3","quantity":)" +
                           std::to_string(i) + "}",
                       {},
                       {},
                       {},
                       {},
                       {}});
  entries.push_back({"",
                     R"({"id":"too-precise","amount":"1","placedAt":"2026-12-07T10:00:00Z",)"
                     R"("net":"1234567890123456789012345678901234567","quantity":1})",
                     {},
                     {},
                     {},
                     {},
                     {}});
  for (const auto& queue : {url, text_url}) {
    sqs::Publisher publisher(client_, queue);
    for (const auto& o : test::run(io_, publisher.send_batch(entries)))
      ASSERT_TRUE(o.ok) << o.error_message;
  }
  const std::string id = std::to_string(getpid());
  auto config_for = [&](const std::string& queue, const std::string& collection, bool typed) {
    return app::parse_config(
        "source:\n  sqs:\n    queue_url: " + queue +
        "\n    endpoint_url: " + test::Emulator::shared().endpoint() +
        "\n    region: us-east-1\n    poll_wait: 1s\n"
        "normalize:\n  fields:\n"
        "    - {name: id, from: /id, required: true}\n"
        "    - {name: amount, from: /amount, type: decimal, scale: 2}\n"
        "    - {name: placedAt, from: /placedAt, type: timestamp}\n"
        "    - {name: placedAtMs, from: /placedAt, type: timestamp, output: epoch_ms}\n"
        "    - {name: price.net, from: /net, type: decimal}\n"
        "    - {name: quantity, from: /quantity, type: integer}\n"
        "identity:\n  versions:\n    V1: [id]\n"
        "metrics:\n  listen: 127.0.0.1:0\nlogging:\n  level: warn\n"
        "sink:\n  type: mongodb\n  table: " +
        collection + "\n  rejects_table: " + collection +
        "_rejects\n  mongodb:\n    uri: " + test::MongoWire::shared().uri() +
        "\n    database: sluice_types\n    typed_values: " + (typed ? "true" : "false") + "\n");
  };
  const auto typed = run_until_drained(config_for(url, "typed_" + id, true));
  EXPECT_EQ(typed.records_in_sink, 20u);
  EXPECT_EQ(typed.rejected_sink_refused, 1u) << "the decimal beyond Decimal128";
  const auto text = run_until_drained(config_for(text_url, "text_" + id, false));
  EXPECT_EQ(text.records_in_sink, 21u);

  auto read_back = [&](const std::string& collection) {
    const auto out = test::run_command(
        std::string("/usr/bin/python3 ") + SLUICE_SOURCE_DIR + "/tests/tools/mongo_types.py '" +
        test::MongoWire::shared().uri() + "' sluice_types " + collection + " 2>&1");
    std::map<std::string, nlohmann::json> by_id;
    std::istringstream lines(out);
    for (std::string line; std::getline(lines, line);) {
      auto doc = nlohmann::json::parse(line, nullptr, false);
      if (doc.is_object() && doc.contains("id")) by_id[doc["id"]["value"]] = doc;
    }
    EXPECT_FALSE(by_id.empty()) << out;
    return by_id;
  };
  const auto typed_docs = read_back("typed_" + id), text_docs = read_back("text_" + id);
  ASSERT_EQ(typed_docs.size(), 20u);
  ASSERT_EQ(text_docs.size(), 21u);
  const auto& seven = typed_docs.at("o-7");
  EXPECT_EQ(seven["amount"]["type"], "Decimal128") << seven;
  EXPECT_EQ(seven["amount"]["value"], "7.50") << "the scale kept";
  EXPECT_EQ(seven["price.net"]["type"], "Decimal128") << seven;
  EXPECT_EQ(seven["price.net"]["value"], "0.007");
  EXPECT_EQ(seven["placedAt"]["type"], "datetime") << seven;
  EXPECT_EQ(seven["placedAt"]["value"], "2026-12-07T09:00:07.123000") << "UTC, milliseconds";
  EXPECT_EQ(seven["placedAtMs"]["type"], "datetime") << seven;
  EXPECT_EQ(seven["placedAtMs"]["value"], "2026-12-07T09:00:07.123000");
  EXPECT_EQ(seven["quantity"]["type"], "int") << seven;
  const auto& seven_text = text_docs.at("o-7");
  EXPECT_EQ(seven_text["amount"]["type"], "str") << seven_text;
  EXPECT_EQ(seven_text["amount"]["value"], "7.50");
  EXPECT_EQ(seven_text["placedAt"]["value"], "2026-12-07T09:00:07.123Z");
  for (const auto& [record, doc] : typed_docs)
    EXPECT_EQ(doc["documentHash"], text_docs.at(record)["documentHash"]) << record;
}

TEST_F(PipelineTest, ThreeProcessesOnOneQueueWriteNoDuplicatesToPostgres) {
  auto& pg = test::Postgres::shared();
  const std::string url = make_queue("pipe-pg-multi");
  const auto events = publish(url, 6000, 0.3, 0.0);
  const std::string table = "multi_" + std::to_string(getpid());
  const std::string yaml = pipeline_yaml(url, "sink:\n  type: postgres\n  table: " + table +
                                                  "\n  postgres:\n    dsn: " + pg.dsn() + "\n");
  const std::string config_path =
      ::testing::TempDir() + "/sluice-multi-" + std::to_string(getpid()) + ".yaml";
  std::ofstream(config_path) << yaml;
  std::vector<pid_t> pids;
  for (int i = 0; i < 3; ++i) {
    pid_t pid = 0;
    const char* argv[] = {SLUICE_BINARY,     "run",  "--config", config_path.c_str(),
                          "--until-drained", nullptr};
    ASSERT_EQ(posix_spawn(&pid, SLUICE_BINARY, nullptr, nullptr, const_cast<char**>(argv), environ),
              0);
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  }
  EXPECT_EQ(pg.query("SELECT count(*), count(DISTINCT hash) FROM " + table),
            std::to_string(events.distinct_records) + "|" +
                std::to_string(events.distinct_records) + "\n");
  EXPECT_EQ(queue_total(url), 0);
  std::filesystem::remove(config_path);
}

TEST_F(PipelineTest, DatabaseDownMidRunLeavesUnwrittenMessagesUnackedAndRecovers) {
  auto& pg = test::Postgres::shared();
  const std::string url = make_queue("pipe-pg-outage");
  const auto events = publish(url, 4000, 0.2, 0.0);
  const std::string table = "outage_" + std::to_string(getpid());
  auto config = app::parse_config(pipeline_yaml(
      url, "sink:\n  type: postgres\n  table: " + table +
               "\n  batch_size: 50\n  max_attempts: 3\n  postgres:\n    dsn: " + pg.dsn() + "\n"));
  config.container.max_in_flight = 100;
  config.container.auto_concurrency = false;
  config.container.min_concurrent_receives = config.container.max_concurrent_receives = 1;
  const std::string endpoint = "http://127.0.0.1:" + std::to_string(test::free_port());
  config.metrics_listen = endpoint.substr(7);
  // The outage is an automatic pause (README): said by /readyz and sluice_paused.
  auto get = [&](const std::string& path) {
    const auto local_url = observe::parse_local_url(endpoint + path);
    try {
      return observe::http_request(local_url);
    } catch (const std::exception&) {
      return observe::LocalResponse{};  // not listening (yet, or any more)
    }
  };
  const std::string paused_series =
      R"(sluice_paused{pipeline="default",reason="sink_unavailable"} )";
  auto paused_by_the_sink = [&] {
    const auto body = get("/metrics").body;
    const auto at = body.find(paused_series);
    return at == std::string::npos ? -1 : body[at + paused_series.size()] - '0';
  };
  app::RunSummary summary;
  std::thread runner([&] { summary = run_until_drained(config); });
  // Stop the database once writing has begun, keep it down, bring it back.
  EXPECT_TRUE(test::wait_until([&] {
    return pg.query("SELECT count(*) FROM pg_tables WHERE tablename = '" + table + "'") == "1\n" &&
           pg.query("SELECT count(*) > 0 FROM " + table) == "t\n";
  })) << "writing never began";
  EXPECT_EQ(paused_by_the_sink(), 0) << "writing, not paused";
  EXPECT_EQ(get("/readyz").status, 200);
  pg.stop();
  const int visible_while_down_start = queue_total(url);
  EXPECT_TRUE(test::wait_until([&] { return paused_by_the_sink() == 1; }, 10s))
      << "sluice_paused{reason=\"sink_unavailable\"} while the database is down";
  const auto readyz = get("/readyz");
  EXPECT_EQ(readyz.status, 503);
  EXPECT_NE(readyz.body.find("sink_unavailable"), std::string::npos) << readyz.body;
  test::hold_fault_for(6s);  // the database down, the pipeline retrying meanwhile
  EXPECT_GT(queue_total(url), 0) << "nothing unwritten was acked while the database was down";
  EXPECT_LE(queue_total(url), visible_while_down_start);
  pg.start();
  // Resumed by itself once the database answers (seen before the drain ends the run).
  EXPECT_TRUE(test::wait_until([&] { return paused_by_the_sink() == 0; }, 60s))
      << "the automatic pause ends with the outage";
  runner.join();
  EXPECT_EQ(pg.query("SELECT count(*) FROM " + table),
            std::to_string(events.distinct_records) + "\n");
  EXPECT_EQ(summary.records_in_sink, events.distinct_records);
  EXPECT_EQ(queue_total(url), 0);
}

TEST_F(PipelineTest, SigtermStopsGracefullyWithExitCodeZero) {
  const std::string url = make_queue("pipe-sigterm");
  const auto events = publish(url, 2000, 0.0, 0.0);
  const std::string db =
      ::testing::TempDir() + "/sluice-sigterm-" + std::to_string(getpid()) + ".db";
  test::remove_sqlite(db);
  const std::string config_path =
      ::testing::TempDir() + "/sluice-sigterm-" + std::to_string(getpid()) + ".yaml";
  // At info: the log says when the container is up.
  std::string yaml = pipeline_yaml(url, "sink:\n  sqlite:\n    path: " + db + "\n");
  yaml.replace(yaml.find("level: warn"), 11, "level: info");
  std::ofstream(config_path) << yaml;
  const std::string log_path = config_path + ".log";
  const int null_fd = ::open("/dev/null", O_RDONLY);
  const int log_fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const pid_t pid =
      test::spawn_child({SLUICE_BINARY, "run", "--config", config_path}, null_fd, log_fd, log_fd);
  ::close(null_fd);
  ::close(log_fd);
  const auto log = [&] {
    std::ifstream in(log_path);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  // Asked to stop while messages are in flight, once it has started (its container is
  // up: the signal is handled from before then) and deleted some.
  const bool started = test::wait_until(
      [&] { return log().find("event=started") != std::string::npos && queue_total(url) < 2000; });
  if (!started) {
    ::kill(pid, SIGKILL);
    test::wait_exit(pid);
    FAIL() << "work never started\n" << log();
  }
  kill(pid, SIGTERM);
  const int status = test::wait_exit(pid);
  EXPECT_EQ(status, 0) << "exit code, or minus the signal\n" << log();
  EXPECT_NE(log().find("event=signal"), std::string::npos) << "the signal was handled";
  // Whatever it wrote was acked and deleted; whatever it did not is still queued.
  auto sink = sinks::make_sqlite_sink({db, "records", "rejects", "FULL", 1000ms, {}});
  const auto written = sink->count_records();
  EXPECT_EQ(written + static_cast<std::uint64_t>(queue_total(url)), events.distinct_records)
      << "nothing lost, nothing acked without its record";
  test::remove_sqlite(db);
  std::filesystem::remove(config_path);
  std::filesystem::remove(log_path);
}

TEST_F(PipelineTest, KillNineThenRestartLeavesExactlyTheDistinctRecords) {
  const std::string url = make_queue("pipe-kill9");
  const auto events = publish(url, 4000, 0.3, 0.0);
  const std::string db = ::testing::TempDir() + "/sluice-kill9-" + std::to_string(getpid()) + ".db";
  test::remove_sqlite(db);
  const std::string config_path =
      ::testing::TempDir() + "/sluice-kill9-" + std::to_string(getpid()) + ".yaml";
  // A short visibility timeout: what the killed process held comes back quickly.
  std::string yaml = pipeline_yaml(url, "sink:\n  sqlite:\n    path: " + db + "\n");
  yaml.replace(yaml.find("    poll_wait: 1s"), 17, "    poll_wait: 1s\n    visibility_timeout: 2s");
  std::ofstream(config_path) << yaml;
  for (int round = 0; round < 2; ++round) {
    pid_t pid = 0;
    const char* argv[] = {SLUICE_BINARY, "run", "--config", config_path.c_str(), nullptr};
    ASSERT_EQ(posix_spawn(&pid, SLUICE_BINARY, nullptr, nullptr, const_cast<char**>(argv), environ),
              0);
    // Killed once this process has done some of the work (its deletes reached the queue).
    const int before = queue_total(url);
    EXPECT_TRUE(test::wait_until([&] { return queue_total(url) < before; }))
        << "round " << round << ": work had started";
    kill(pid, SIGKILL);  // mid-batch, mid-delete: no chance to clean up
    int status = 0;
    waitpid(pid, &status, 0);
  }
  pid_t pid = 0;
  const char* argv[] = {SLUICE_BINARY,     "run",  "--config", config_path.c_str(),
                        "--until-drained", nullptr};
  ASSERT_EQ(posix_spawn(&pid, SLUICE_BINARY, nullptr, nullptr, const_cast<char**>(argv), environ),
            0);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  {
    auto sink = sinks::make_sqlite_sink({db, "records", "rejects", "FULL", 1000ms, {}});
    EXPECT_EQ(sink->count_records(), events.distinct_records) << "nothing lost, nothing twice";
  }  // closed before its files are removed
  EXPECT_EQ(queue_total(url), 0);
  test::remove_sqlite(db);
  std::filesystem::remove(config_path);
}

TEST(MetricsServer, ServesMetricsHealthAndReadiness) {
  app::PipelineMetrics metrics;
  metrics.record_rejected("malformed");
  metrics.record_outcome(sinks::WriteOutcome::inserted);
  std::atomic<bool> ready{false};
  app::MetricsServer server(
      "127.0.0.1:0", [&] { return metrics.serialize(); }, [&] { return ready.load(); });
  asio::io_context io;
  aws::HttpClientOptions options;
  options.use_env_proxy = false;
  aws::HttpClient http(io.get_executor(), options);
  auto get = [&](const std::string& path) {
    aws::HttpRequest r;
    r.url = aws::Url::parse("http://127.0.0.1:" + std::to_string(server.port()) + path);
    return test::run(io, http.send(r));
  };
  const auto m = get("/metrics");
  EXPECT_EQ(m.status, 200);
  // Every series carries its pipeline's name (one process may run several).
  EXPECT_NE(
      m.body.find("sluice_messages_rejected_total{pipeline=\"default\",reason=\"malformed\"} 1"),
      std::string::npos)
      << m.body;
  EXPECT_NE(m.body.find("sluice_records_written_total{pipeline=\"default\"} 1"), std::string::npos);
  EXPECT_NE(m.body.find("sluice_sink_write_latency_seconds"), std::string::npos);
  EXPECT_EQ(get("/healthz").status, 200);
  EXPECT_EQ(get("/readyz").status, 503);
  // `sluice health`: the exit code a container health check reads.
  const std::string base = "http://127.0.0.1:" + std::to_string(server.port());
  EXPECT_EQ(app::probe(base + "/healthz"), 0);
  EXPECT_EQ(app::probe(base + "/readyz"), 1);
  EXPECT_EQ(app::probe("not a url"), 2);
  ready = true;
  EXPECT_EQ(get("/readyz").status, 200);
  EXPECT_EQ(app::probe(base + "/readyz"), 0);
  EXPECT_EQ(get("/nope").status, 404);
}

// `sluice plan` against a live pipeline working through a backlog: every recommendation
// follows from the figures it reports (the arithmetic redone here), the figures agree
// with the run, and the pipeline exports the autoscale signal and latency quantiles.
TEST_F(PipelineTest, PlanSizesALivePipelineFromItsMetrics) {
  const std::string url = make_queue("pipe-plan");
  const int published = 10000;
  publish(url, published, 0.1, 0.0);
  const std::string db = ::testing::TempDir() + "/sluice-plan-" + std::to_string(getpid()) + ".db";
  test::remove_sqlite(db);
  const int port = test::free_port();
  std::string yaml = pipeline_yaml(
      url, "sink:\n  type: sqlite\n  batch_size: 50\n  sqlite:\n    path: " + db + "\n");
  // Few held messages and one receive: a drain of several seconds to observe.
  yaml.replace(yaml.find("concurrency: 2-4"), 16, "concurrency: 1  ");
  yaml.replace(yaml.find("max_in_flight: 200"), 18, "max_in_flight: 20 ");
  yaml.replace(yaml.find("listen: 127.0.0.1:0"), 19, "listen: 127.0.0.1:" + std::to_string(port));
  yaml += "autoscale:\n  period: 1s\n  periods: 2\n  spare: 1\n  running_tasks: 2\n";
  const auto config = app::parse_config(yaml);
  std::thread pipeline([&] { run_until_drained(config); });
  asio::io_context io;
  aws::HttpClientOptions http_options;
  http_options.use_env_proxy = false;
  aws::HttpClient http(io.get_executor(), http_options);
  auto get = [&](const std::string& path) {
    aws::HttpRequest r;
    r.url = aws::Url::parse("http://127.0.0.1:" + std::to_string(port) + path);
    return test::run(io, http.send(r));
  };
  // Observed once it works (its endpoint up, messages settled).
  ASSERT_TRUE(test::wait_until(
      [&] {
        try {
          if (get("/metrics").body.find("sluice_messages_settled_total{") == std::string::npos)
            return false;
          const auto signal = nlohmann::json::parse(get("/autoscale").body);
          return signal.contains("in_flight_max_average") &&
                 signal["in_flight_max_average"].get<double>() > 0;
        } catch (const std::exception&) {
          return false;
        }
      },
      20s));
  // The pipeline's own endpoints, while it works; then the plan.
  const auto metrics = get("/metrics").body;
  const auto autoscale = nlohmann::json::parse(get("/autoscale").body);

  const std::string fragment =
      ::testing::TempDir() + "/sluice-plan-" + std::to_string(getpid()) + ".yaml";
  const auto [status, out] = test::run_with_status(
      std::string(SLUICE_BINARY) + " plan --metrics-url http://127.0.0.1:" + std::to_string(port) +
      "/metrics --duration 4s --interval 200ms --window 1s --headroom 10s --output json --write " +
      fragment);

  pipeline.join();
  test::remove_sqlite(db);

  ASSERT_EQ(status, 0) << out;
  const auto doc = nlohmann::json::parse(out.substr(out.find('{')));
  const auto& m = doc["measured"];
  const double rate = m["rate"], min_rate = m["min_sustained_rate"], peak = m["peak_rate"];
  EXPECT_GT(min_rate, 0) << out;
  EXPECT_LE(min_rate, rate * 1.0001) << out;
  EXPECT_GE(peak * 1.0001, rate) << out;
  // No more settled than were published, and the run was busy for the whole window.
  EXPECT_LE(rate * m["seconds"].get<double>(), published) << out;
  EXPECT_EQ(m["max_in_flight"], 20.0);
  EXPECT_EQ(m["sink_batch_size"], 50.0);
  // A fixed concurrency, as /metrics says (the plan would keep auto).
  EXPECT_NE(metrics.find("sluice_setting{name=\"auto_concurrency\",pipeline=\"default\"} 0"),
            std::string::npos);
  EXPECT_EQ(m["auto_concurrency"], false) << out;
  EXPECT_GT(m["receive_p99_s"].get<double>(), 0);
  EXPECT_GE(m["receive_p99_s"].get<double>(), m["receive_p50_s"].get<double>());
  EXPECT_GE(m["sink_batch_p99_s"].get<double>(), m["sink_batch_p50_s"].get<double>());
  EXPECT_GT(m["batches_per_s"].get<double>(), 0);
  const auto& r = doc["recommended"];
  // Visibility timeout: ceil(20 / min rate + sink p99 + 10 s).
  const double visibility = std::ceil(20.0 / min_rate + m["sink_batch_p99_s"].get<double>() + 10.0);
  EXPECT_EQ(r["source.sqs.visibility_timeout"]["value"],
            std::to_string(static_cast<long>(visibility)) + "s")
      << out;
  // 20 held at once all the time: the limit held throughput, so it doubles.
  EXPECT_GE(m["in_flight_peak"].get<double>(), 18.0) << out;
  EXPECT_EQ(r["source.max_in_flight"]["value"], "40") << out;
  const double loops = rate * m["receive_mean_s"].get<double>() / 10.0;
  const long min_loops = std::max(1L, static_cast<long>(std::ceil(loops)));
  const long max_loops = std::max(min_loops + 1, static_cast<long>(std::ceil(2 * loops)));
  EXPECT_EQ(r["source.concurrency"]["value"],
            std::to_string(min_loops) + "-" + std::to_string(max_loops))
      << out;
  const double busy = m["batches_per_s"].get<double>() * m["sink_batch_mean_s"].get<double>();
  EXPECT_EQ(r["sink.writers"]["value"],
            std::to_string(std::max(1L, static_cast<long>(std::ceil(busy / 0.7)))))
      << out;
  EXPECT_FALSE(r["sink.batch_size"]["formula"].get<std::string>().empty());
  std::ifstream written(fragment);
  const std::string text((std::istreambuf_iterator<char>(written)), {});
  EXPECT_NE(text.find("source:\n  max_in_flight: 40  # 2 x max_in_flight 20"), std::string::npos)
      << text;
  EXPECT_NE(text.find("\n  sqs:\n    visibility_timeout: " +
                      std::to_string(static_cast<long>(visibility)) + "s  # ceil("),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("sink:\n  writers: "), std::string::npos) << text;
  std::filesystem::remove(fragment);

  // The latency quantiles and the autoscale signal of the pipeline's own queue.
  EXPECT_NE(metrics.find("sluice_latency_quantile_seconds{pipeline=\"default\",q=\"0.99\","
                         "stage=\"sink_batch\"}"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("sluice_setting{name=\"max_in_flight\",pipeline=\"default\"} 20"),
            std::string::npos);
  // The concurrency a database sees and the pace (README: what Lambda's
  // MaximumConcurrency does): each a setting series.
  for (const char* setting : {"sink_writers", "worker_threads", "max_messages_per_second"})
    EXPECT_NE(
        metrics.find("sluice_setting{name=\"" + std::string(setting) + "\",pipeline=\"default\"} "),
        std::string::npos)
        << setting;
  // The SQS calls that make the bill: receives and deletes made while it worked.
  const auto value_of = [&](const std::string& name) {
    const std::string series = "\n" + name + "{pipeline=\"default\"} ";
    const auto at = metrics.find(series);
    return at == std::string::npos ? -1.0 : std::stod(metrics.substr(at + series.size()));
  };
  const double receives = value_of("sluice_sqs_receive_requests_total");
  const double deletes = value_of("sluice_sqs_delete_requests_total");
  EXPECT_GT(receives, 0) << metrics;
  EXPECT_GT(deletes, 0) << metrics;
  // Batches of 10 both ways under a backlog: a delete per message would be ~10x.
  EXPECT_LE(deletes, 3 * receives) << metrics;
  EXPECT_GE(value_of("sluice_sqs_change_visibility_requests_total"), 0) << metrics;
  EXPECT_NE(metrics.find("sluice_autoscale_desired_tasks{pipeline=\"default\"} "),
            std::string::npos);
  // About 20 in flight, capacity 20 (max_in_flight), 1 spare: 2 tasks, 2 running.
  EXPECT_GT(autoscale["in_flight_max_average"].get<double>(), 0) << autoscale.dump();
  EXPECT_EQ(autoscale["capacity"], 20.0);
  EXPECT_EQ(autoscale["running"], 2);
  EXPECT_EQ(autoscale["desired_tasks"],
            static_cast<long>(
                std::ceil(autoscale["in_flight_max_average"].get<double>() / 20 + 1 - 1e-9)))
      << autoscale.dump();
}
