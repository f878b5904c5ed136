// Faults injected between Sluice and the real servers (tests/support/fault_proxy):
// a frozen database, a frozen SQS endpoint, SQS answering 5xx and throttling, reset
// connections, truncated bodies. Every test proves the fault happened (the proxy's
// counters) and that work had started before the signal, then checks the promise:
// the deadline held, and nothing was lost or written twice.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <boost/asio/ip/tcp.hpp>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "app/run.hpp"
#include "cli/publish.hpp"
#include "config/config.hpp"
#include "sluice/aws/http.hpp"
#include "sluice/container.hpp"
#include "sluice/driver/sink.hpp"
#include "sluice/sqs/publisher.hpp"
#include "sluice/sqs/source.hpp"
#include "support/emulator.hpp"
#include "support/fault_proxy.hpp"
#include "support/pipeline.hpp"
#include "support/wait.hpp"
#include "support/work.hpp"

extern char** environ;
using namespace sluice;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

// The whole stop holds shutdown_deadline (README, RELIABILITY.md); this is room for
// delivering the signal and reaping the process on a loaded machine, and for a
// sanitizer's own work at exit (ThreadSanitizer's took 0.4 s here), no more.
constexpr auto kSlack = 1s;

class FaultTest : public test::PipelineFixture {
 protected:
  app::GeneratedEvents publish(const std::string& url, int count, double duplicates,
                               unsigned seed = 11) {
    return PipelineFixture::publish(url, count, duplicates, 0.0, seed);
  }
  std::string yaml(const std::string& url, const std::string& endpoint, const std::string& sink) {
    return "source:\n  sqs:\n    queue_url: " + url + "\n    endpoint_url: " + endpoint +
           "\n    region: us-east-1\n    poll_wait: 1s\n    visibility_timeout: 3s\n"
           "    delete_flush_interval: 20ms\n"
           "  concurrency: 2-4\n  max_in_flight: 200\n  failure_backoff: 1s\n"
           "  shutdown_deadline: 3s\n" +
           test::inventory_stages_yaml() +
           "metrics:\n  listen: 127.0.0.1:0\nlogging:\n  level: info\n" + sink;
  }
  std::string write_config(const std::string& name, const std::string& text) {
    const std::string path =
        ::testing::TempDir() + "/sluice-" + name + "-" + std::to_string(getpid()) + ".yaml";
    std::ofstream(path) << text;
    return path;
  }
  // `sluice run` (or other arguments) to its end: the exit code and its stderr.
  static std::pair<int, std::string> run_to_exit(const std::string& config_path) {
    return run_to_exit(std::vector<std::string>{"run", "--config", config_path});
  }
  static std::pair<int, std::string> run_to_exit(const std::vector<std::string>& args) {
    const std::string err =
        ::testing::TempDir() + "/sluice-stderr-" + std::to_string(getpid()) + ".txt";
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid = 0;
    std::vector<const char*> argv{SLUICE_BINARY};
    for (const auto& a : args) argv.push_back(a.c_str());
    argv.push_back(nullptr);
    EXPECT_EQ(posix_spawn(&pid, SLUICE_BINARY, &actions, nullptr, const_cast<char**>(argv.data()),
                          environ),
              0);
    posix_spawn_file_actions_destroy(&actions);
    int status = 0;
    waitpid(pid, &status, 0);
    std::stringstream text;
    text << std::ifstream(err).rdbuf();
    std::filesystem::remove(err);
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, text.str()};
  }
  static pid_t spawn_run(const std::string& config_path) {
    pid_t pid = 0;
    const char* argv[] = {SLUICE_BINARY, "run", "--config", config_path.c_str(), nullptr};
    EXPECT_EQ(posix_spawn(&pid, SLUICE_BINARY, nullptr, nullptr, const_cast<char**>(argv), environ),
              0);
    return pid;
  }
  // The frozen-server tests: `sluice run` works until `started` (work is under way),
  // then the proxy freezes, and once it holds a chunk (the fault happened) SIGTERM.
  static void freeze_then_terminate(const std::string& config_path, test::TcpFaultProxy& proxy,
                                    const std::function<bool()>& started) {
    const pid_t pid = spawn_run(config_path);
    const bool working = test::wait_until(started, 30s);
    if (working) proxy.stall(true);
    const bool frozen =
        working && test::wait_until([&] { return proxy.stalled_chunks() > 0; }, 10s);
    if (!frozen) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      proxy.stall(false);
      FAIL() << (working ? "the proxy held nothing: no fault" : "work never started");
    }
    terminate_within_deadline(pid);
    proxy.stall(false);
  }
  // SIGTERM; the process must be gone within its 3 s deadline, with exit code 0 (a
  // clean stop) or 5 (the watchdog).
  static void terminate_within_deadline(pid_t pid) {
    const auto signalled = Clock::now();
    kill(pid, SIGTERM);
    int status = 0;
    waitpid(pid, &status, 0);
    const auto took = Clock::now() - signalled;
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    std::cout << "stopped " << std::chrono::duration<double>(took).count()
              << " s after SIGTERM (shutdown_deadline 3 s), exit code " << code << "\n";
    EXPECT_LE(took, 3s + kSlack) << "exit " << code;
    EXPECT_TRUE(code == 0 || code == 5) << code;
  }
};

}  // namespace

// Before: with the database frozen (accepting, never answering), SIGTERM with a 5 s
// deadline left the process running 30 s later.
TEST_F(FaultTest, FrozenDatabaseStillExitsWithinTheDeadline) {
  auto& pg = test::Postgres::shared();
  test::TcpFaultProxy proxy("127.0.0.1", pg.port());
  const std::string url = make_queue("fault-frozen-db");
  const auto events = publish(url, 3000, 0.0);
  const std::string table = "frozen_" + std::to_string(getpid());
  const std::string dsn =
      "host=127.0.0.1 port=" + std::to_string(proxy.port()) + " user=postgres dbname=postgres";
  const std::string config_path = write_config(
      "frozen-db", yaml(url, test::Emulator::shared().endpoint(),
                        "sink:\n  type: postgres\n  table: " + table +
                            "\n  batch_size: 50\n  postgres:\n    dsn: " + dsn + "\n"));
  // Work has started: rows are in the table (read past the proxy).
  ASSERT_NO_FATAL_FAILURE(freeze_then_terminate(config_path, proxy, [&] {
    return pg.query("SELECT count(*) FROM pg_tables WHERE tablename = '" + table + "'") == "1\n" &&
           pg.query("SELECT count(*) > 0 FROM " + table) == "t\n";
  }));
  // Nothing lost: what was not written is delivered again, and a run on a healthy
  // database stores exactly the distinct records.
  auto config = app::parse_config(yaml(
      url, test::Emulator::shared().endpoint(),
      "sink:\n  type: postgres\n  table: " + table + "\n  postgres:\n    dsn: " + pg.dsn() + "\n"));
  const auto summary = run_until_drained(config);
  EXPECT_EQ(pg.query("SELECT count(*) FROM " + table),
            std::to_string(events.distinct_records) + "\n");
  EXPECT_EQ(summary.records_in_sink, events.distinct_records);
  EXPECT_EQ(queue_total(url), 0);
  std::filesystem::remove(config_path);
}

// Before: with the SQS endpoint frozen the process exited after ~120 s (queue statistics
// read synchronously in the main loop, a fixed 30 s final flush).
TEST_F(FaultTest, FrozenSqsEndpointStillExitsWithinTheDeadline) {
  test::TcpFaultProxy proxy("127.0.0.1", test::Emulator::shared().port());
  const std::string url = make_queue("fault-frozen-sqs");
  const auto events = publish(url, 3000, 0.0);
  const std::string db =
      ::testing::TempDir() + "/sluice-frozen-sqs-" + std::to_string(getpid()) + ".db";
  test::remove_sqlite(db);
  // The queue URL names the emulator; requests go to the endpoint (the proxy).
  const std::string config_path =
      write_config("frozen-sqs", yaml(url, "http://127.0.0.1:" + std::to_string(proxy.port()),
                                      "sink:\n  sqlite:\n    path: " + db + "\n"));
  // Work has started: messages were deleted.
  ASSERT_NO_FATAL_FAILURE(
      freeze_then_terminate(config_path, proxy, [&] { return queue_total(url) < 2900; }));
  auto config = app::parse_config(
      yaml(url, test::Emulator::shared().endpoint(), "sink:\n  sqlite:\n    path: " + db + "\n"));
  const auto summary = run_until_drained(config);
  EXPECT_EQ(summary.records_in_sink, events.distinct_records) << "nothing lost, nothing twice";
  EXPECT_EQ(queue_total(url), 0);
  test::remove_sqlite(db);
  std::filesystem::remove(config_path);
}

// Before: a queue URL naming no queue ran forever, logging QueueDoesNotExist.
TEST_F(FaultTest, AMissingQueueIsAnErrorAtStartWithExitCode2) {
  const std::string url =
      test::Emulator::shared().queue_url(test::unique_queue_name("never-created"));
  const std::string config_path =
      write_config("missing-queue",
                   yaml(url, test::Emulator::shared().endpoint(),
                        "sink:\n  sqlite:\n    path: " + ::testing::TempDir() + "/missing.db\n"));
  const auto [code, stderr_text] = run_to_exit(config_path);
  EXPECT_EQ(code, 2);
  EXPECT_NE(stderr_text.find("source.sqs.queue_url (SLUICE_QUEUE_URL)"), std::string::npos)
      << stderr_text;
  EXPECT_NE(stderr_text.find("does not exist"), std::string::npos) << stderr_text;
  EXPECT_NE(stderr_text.find("wait_for_queue"), std::string::npos) << stderr_text;
  std::filesystem::remove(config_path);
  test::remove_sqlite(::testing::TempDir() + "/missing.db");
}

// The README: bad usage is exit code 2 (CLI11's own codes, such as 106 for a missing
// option, used to leak out).
TEST_F(FaultTest, BadUsageExitsWithCode2) {
  const auto [missing_option, text] = run_to_exit(std::vector<std::string>{"run"});
  EXPECT_EQ(missing_option, 2) << text;
  EXPECT_NE(text.find("--config"), std::string::npos) << text;
  EXPECT_EQ(run_to_exit(std::vector<std::string>{"run", "--no-such-flag"}).first, 2);
  EXPECT_EQ(run_to_exit(std::vector<std::string>{"--help"}).first, 0);
}

// A dead-letter queue that does not exist would make every reject fail and come back:
// an error at start too.
TEST_F(FaultTest, AMissingDeadLetterQueueIsAnErrorAtStartWithExitCode2) {
  const std::string url = make_queue("fault-dlq-missing");
  const std::string missing =
      test::Emulator::shared().queue_url(test::unique_queue_name("never-created-dlq"));
  const std::string config_path = write_config(
      "missing-dlq",
      yaml(url, test::Emulator::shared().endpoint(),
           "sink:\n  sqlite:\n    path: " + ::testing::TempDir() +
               "/missing-dlq.db\nsource:\n  sqs:\n    dead_letter_queue_url: " + missing + "\n"));
  const auto [code, stderr_text] = run_to_exit(config_path);
  EXPECT_EQ(code, 2);
  EXPECT_NE(stderr_text.find("source.sqs.dead_letter_queue_url (SLUICE_DEAD_LETTER_QUEUE_URL)"),
            std::string::npos)
      << stderr_text;
  std::filesystem::remove(config_path);
  test::remove_sqlite(::testing::TempDir() + "/missing-dlq.db");
}

// Before: --until-drained exited 0 although records were never written (the queue's
// redrive policy took the messages whose writes kept failing).
TEST_F(FaultTest, DrainedWithRecordsNeverWrittenExitsWithCode4) {
  auto& pg = test::Postgres::shared();
  const std::string dlq_name = test::unique_queue_name("fault-redrive-dlq");
  test::run(io_, client_->create_queue(dlq_name));
  const std::string name = test::unique_queue_name("fault-redrive");
  test::run(io_, client_->create_queue(
                     name, {{"RedrivePolicy",
                             R"({"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:)" +
                                 dlq_name + R"(","maxReceiveCount":"2"})"}}));
  const std::string url = test::Emulator::shared().queue_url(name);
  publish(url, 200, 0.0);
  // The database fails some rows with a serialization failure (SQLSTATE 40001): a
  // transient error, retried, never a refusal.
  const std::string table = "redrive_" + std::to_string(getpid());
  pg.query("CREATE TABLE " + table +
           " (hash text NOT NULL, message_id text, document jsonb NOT NULL, written_at timestamptz "
           "NOT NULL DEFAULT now());"
           "CREATE FUNCTION " +
           table +
           "_fail() RETURNS trigger AS 'BEGIN IF "
           "(NEW.document->>''quantity'')::int % 7 = 0 THEN RAISE EXCEPTION ''injected'' USING "
           "ERRCODE = ''40001''; END IF; RETURN NEW; END' LANGUAGE plpgsql;"
           "CREATE TRIGGER fail BEFORE INSERT ON " +
           table + " FOR EACH ROW EXECUTE FUNCTION " + table + "_fail();");
  auto config = app::parse_config(
      yaml(url, test::Emulator::shared().endpoint(),
           "sink:\n  type: postgres\n  table: " + table +
               "\n  batch_size: 20\n  max_attempts: 1\n  postgres:\n    dsn: " + pg.dsn() + "\n"));
  app::RunOptions options;
  options.until_drained = true;
  options.drained_for = 1500ms;
  options.quiet = true;
  app::RunSummary summary;
  EXPECT_EQ(app::run_pipeline(config, options, summary), 4);
  EXPECT_GT(summary.failed, 0u) << "the fault happened";
  EXPECT_GT(summary.unresolved, 0u);
  EXPECT_EQ(queue_total(url), 0) << "drained: the redrive policy took the failing ones";
  EXPECT_EQ(queue_total(test::Emulator::shared().queue_url(dlq_name)),
            static_cast<int>(summary.unresolved))
      << "each message never written is in the dead-letter queue";
}

namespace {
SqsSourceOptions source_through(const std::string& url, const std::string& endpoint) {
  SqsSourceOptions o;
  o.queue_url = url;
  o.client = test::emulator_client_options();
  o.client.endpoint_url = endpoint;
  o.poll_wait = 1s;
  o.delete_flush_interval = 5ms;
  return o;
}
}  // namespace

// Before: a permit came back when the ack was queued, so with deletes lagging the
// messages received and not yet deleted grew past max_in_flight without bound.
TEST_F(FaultTest, AcksWaitingForSlowDeletesCountAgainstMaxInFlight) {
  const std::string url = make_queue("fault-slow-deletes");
  publish(url, 300, 0.0);
  test::HttpFaults faults;
  faults.latency = 300ms;
  faults.only_targets = {"DeleteMessageBatch"};
  test::HttpFaultProxy proxy("127.0.0.1", test::Emulator::shared().port(), faults);
  ContainerOptions options;
  options.name = "slow-deletes";
  options.max_in_flight = 20;
  options.max_concurrent_receives = 4;
  std::atomic<int> handled{0};
  Container container(options, make_sqs_source(source_through(url, proxy.endpoint())),
                      MessageHandler([&](Message&) { ++handled; }));
  container.start();
  std::int64_t worst = 0, pending_seen = 0;
  while (handled < 300) {
    const auto stats = container.stats();
    worst = std::max<std::int64_t>(worst, static_cast<std::int64_t>(stats.received - stats.acked));
    pending_seen = std::max(pending_seen, stats.pending_acks);
    std::this_thread::sleep_for(5ms);  // the sampler's pace: it records, it waits for nothing
  }
  container.stop();
  EXPECT_GE(proxy.count("DeleteMessageBatch"), 1u);
  EXPECT_GT(pending_seen, 0) << "the deletes did lag";
  EXPECT_LE(worst, 20) << "received but not yet deleted never exceeded max_in_flight";
  EXPECT_EQ(container.stats().acked, 300u);
  EXPECT_EQ(queue_total(url), 0);
}

// SQS answering 5xx, throttling, truncated bodies and resets on every call while
// messages are held longer than their visibility: the heartbeat (its own connections)
// keeps every lease, nothing is delivered twice, nothing is lost.
TEST_F(FaultTest, HeartbeatsKeepLeasesThroughThrottlingAndResets) {
  const std::string url = make_queue("fault-heartbeat");
  publish(url, 40, 0.0);
  test::HttpFaults faults;
  faults.server_error = 0.04;
  faults.unavailable = 0.03;
  faults.throttling = 0.05;
  faults.reset = 0.02;
  faults.truncate = 0.02;
  test::HttpFaultProxy proxy("127.0.0.1", test::Emulator::shared().port(), faults);
  ContainerOptions options;
  options.name = "heartbeat-faults";
  options.max_in_flight = 40;
  options.worker_threads = 40;
  options.heartbeat_interval = 300ms;
  auto source = source_through(url, proxy.endpoint());
  source.visibility_timeout = 2s;  // each message is held for 3 s: only the heartbeat keeps it
  std::mutex m;
  std::map<std::string, int> seen;
  Container container(options, make_sqs_source(source), MessageHandler([&](Message& msg) {
                        {
                          std::lock_guard lock(m);
                          ++seen[std::string(msg.id())];
                        }
                        test::work_for(3s);
                      }));
  container.start();
  EXPECT_TRUE(test::wait_until([&] { return container.stats().acked == 40; }, 60s));
  container.stop();
  EXPECT_GT(proxy.faults_injected(), 0u) << "faults were injected";
  EXPECT_GT(proxy.count("ChangeMessageVisibilityBatch"), 0u) << "the heartbeat ran";
  EXPECT_EQ(seen.size(), 40u);
  for (const auto& [id, n] : seen) EXPECT_EQ(n, 1) << id << " was delivered again";
  EXPECT_EQ(container.stats().lost, 0u);
  EXPECT_EQ(queue_total(url), 0);
}

// ---------------------------------------------------------------- hostile bodies
// At least 30 bodies a new user's producers (or an attacker) can send: each is rejected
// with a reason that names the problem, or stored when it is valid after all; the good
// events are all stored, the queue drains, nothing crashes. On every sink.
namespace {

struct Hostile {
  std::string body;
  std::string expected;  // a reject reason, "stored", or "sink" (the database decides)
  std::string detail;    // a word the reject's detail must contain
};

std::vector<Hostile> hostile_corpus() {
  const std::string good_tail = R"("locationId":"L","eventType":"RECEIVED","quantity":3})";
  auto event = [&](const std::string& sku) { return R"({"skuId":)" + sku + "," + good_tail; };
  std::vector<Hostile> c = {
      {"{", "malformed", "JSON"},
      {"{\"skuId\":", "malformed", "JSON"},
      {"null", "schema_drift", "object"},
      {"[]", "schema_drift", "object"},
      {"\"a string\"", "schema_drift", "object"},
      {"42", "schema_drift", "object"},
      {"true", "schema_drift", "object"},
      {"\xEF\xBB\xBF" + event("\"BOM\""), "malformed", "byte-order mark"},
      {R"({"skuId":"A","skuId":"B",)" + good_tail, "malformed", "twice"},
      {R"({"skuId":"A","sku\u0049d":"B",)" + good_tail, "malformed", "twice"},
      {R"({"skuId":"A","meta":{"x":1,"x":2},)" + good_tail, "malformed", "twice"},
      {std::string(100, '[') + std::string(100, ']'), "malformed", "JSON"},
      {R"({"skuId":"A","pad":")" + std::string(5000, 'p') + "\"," + good_tail, "malformed",
       "max_body_bytes"},
      {R"({"locationId":"L","eventType":"E","quantity":1})", "validation", "skuId"},
      {R"({"skuId":null,"locationId":"L","eventType":"E","quantity":1})", "validation", "skuId"},
      {R"({"skuId":"A","locationId":"L","eventType":"E","quantity":"many"})", "schema_drift",
       "quantity"},
      {R"({"skuId":"A","locationId":"L","eventType":"E","quantity":1.5})", "schema_drift",
       "quantity"},
      {R"({"skuId":"A","locationId":"L","eventType":"E","quantity":1e400})", "malformed",
       "out of range"},
      {R"({"skuId":"A","locationId":"L","eventType":"E","quantity":99999999999999999999})",
       "malformed", "out of range"},
      {R"({"skuId":{"nested":true},"locationId":"L","eventType":"E","quantity":1})", "schema_drift",
       "skuId"},
      {R"({"skuId":["A"],"locationId":"L","eventType":"E","quantity":1})", "schema_drift", "skuId"},
      {event("\"A\"") + " trailing", "malformed", "JSON"},
      {R"({/* comment */"skuId":"A",)" + good_tail, "malformed", "JSON"},
      {R"({'skuId':'A'})", "malformed", "JSON"},
      {R"({"skuId":"A","locationId":"L","eventType":"E","quantity":NaN})", "malformed", "JSON"},
      {R"({"skuId":"A","locationId":"L","eventType":"E","quantity":1,})", "malformed", "JSON"},
      {"{\"skuId\":\"tab\there\"," + good_tail, "malformed", "JSON"},
      {R"({"skuId":"\ud800",)" + good_tail, "malformed", "JSON"},
      // Valid after all: stored.
      {event("\"" + std::string(3000, 'S') + "\""), "stored", ""},
      // (fauxqs refuses characters above U+FFFF, which SQS allows: BMP only here.)
      {event("\"caf\u00e9 \xE2\x98\x83\""), "stored", ""},
      {event("12345"), "stored", ""},
      {R"({"skuId":"Q","locationId":"L","eventType":"E","quantity":"7"})", "stored", ""},
      {R"({"skuId":"DEEP","locationId":"L","eventType":"E","quantity":1,"x":{"a":{"b":{"c":[1,[2,[3]]]}}}})",
       "stored", ""},
      // The database decides: PostgreSQL's jsonb refuses \u0000.
      {event(R"("nul\u0000byte")"), "sink", ""},
  };
  return c;
}

}  // namespace

class HostileBodies : public FaultTest, public ::testing::WithParamInterface<std::string> {};

TEST_P(HostileBodies, EachIsRejectedWithItsReasonOrStoredAndTheGoodOnesAllArrive) {
  const std::string sink_kind = GetParam();
  const std::string url = make_queue("hostile-" + sink_kind);
  const auto corpus = hostile_corpus();
  ASSERT_GE(corpus.size(), 30u);
  const auto good = publish(url, 100, 0.0, 23);
  {
    std::vector<sqs::SendMessageEntry> entries;
    for (const auto& h : corpus) entries.push_back({"", h.body, {}, {}, {}, {}, {}});
    sqs::Publisher publisher(client_, url);
    for (const auto& o : test::run(io_, publisher.send_batch(std::move(entries))))
      ASSERT_TRUE(o.ok) << o.error_message;
  }
  const std::string id = std::to_string(getpid());
  std::string sink;
  if (sink_kind == "sqlite") {
    sink = "sink:\n  sqlite:\n    path: " + ::testing::TempDir() + "/hostile-" + id + ".db\n";
    test::remove_sqlite(::testing::TempDir() + "/hostile-" + id + ".db");
  } else if (sink_kind == "postgres") {
    sink = "sink:\n  type: postgres\n  table: hostile_" + id +
           "\n  rejects_table: hostile_rejects_" + id +
           "\n  postgres:\n    dsn: " + test::Postgres::shared().dsn() + "\n";
  } else {
    sink = "sink:\n  type: mongodb\n  table: hostile_" + id +
           "\n  rejects_table: hostile_rejects_" + id +
           "\n  mongodb:\n    uri: " + test::MongoWire::shared().uri() +
           "\n    database: sluice_hostile\n    id_from_hash: true\n    write_concern: \"1\"\n";
  }
  std::string text = yaml(url, test::Emulator::shared().endpoint(), sink);
  text += "decode:\n  max_body_bytes: 4096\n  max_depth: 32\n";
  const auto summary = run_until_drained(app::parse_config(text));
  std::map<std::string, std::size_t> expected;
  std::size_t stored = 0, sink_decides = 0;
  for (const auto& h : corpus) {
    if (h.expected == "stored")
      ++stored;
    else if (h.expected == "sink")
      ++sink_decides;
    else
      ++expected[h.expected];
  }
  EXPECT_EQ(summary.rejected_malformed, expected["malformed"]);
  EXPECT_EQ(summary.rejected_validation, expected["validation"]);
  EXPECT_EQ(summary.rejected_schema_drift, expected["schema_drift"]);
  if (sink_kind == "postgres") {
    EXPECT_EQ(summary.rejected_sink_refused, sink_decides);
  }
  EXPECT_EQ(summary.records_in_sink + summary.rejected_sink_refused,
            good.distinct_records + stored + sink_decides)
      << "every good event and every valid hostile one is stored";
  EXPECT_EQ(summary.failed, 0u);
  EXPECT_EQ(queue_total(url), 0) << "drained";
  if (sink_kind == "postgres") {
    // Each reject names its problem.
    const std::string details = test::Postgres::shared().query(
        "SELECT reason || ': ' || detail FROM hostile_rejects_" + id);
    for (const auto& h : corpus) {
      if (!h.detail.empty()) {
        EXPECT_NE(details.find(h.detail), std::string::npos) << h.detail << " in\n" << details;
      }
    }
    EXPECT_NE(details.find("sink_refused: PostgreSQL"), std::string::npos) << details;
  }
  if (sink_kind == "sqlite") test::remove_sqlite(::testing::TempDir() + "/hostile-" + id + ".db");
}

INSTANTIATE_TEST_SUITE_P(Sinks, HostileBodies, ::testing::Values("sqlite", "postgres", "mongodb"));

// The issue's volume run, at CI size (SLUICE_FAULT_MESSAGES=100000 for the full one):
// through 10% SQS errors (500, 503, throttling), resets and truncated answers, every
// distinct record is in PostgreSQL exactly once and the queue drains.
TEST_F(FaultTest, ThroughTenPercentSqsFaultsEveryRecordIsStoredExactlyOnce) {
  const char* env = std::getenv("SLUICE_FAULT_MESSAGES");
  const int messages = env ? std::atoi(env) : 20000;
  auto& pg = test::Postgres::shared();
  const std::string url = make_queue("fault-volume");
  const auto events = publish(url, messages, 0.2, 31);
  test::HttpFaults faults;
  faults.server_error = 0.03;
  faults.unavailable = 0.03;
  faults.throttling = 0.04;
  faults.reset = 0.01;
  faults.truncate = 0.005;
  test::HttpFaultProxy proxy("127.0.0.1", test::Emulator::shared().port(), faults);
  const std::string table = "volume_" + std::to_string(getpid());
  const std::string config_path = write_config(
      "volume",
      yaml(url, proxy.endpoint(),
           "sink:\n  type: postgres\n  table: " + table +
               "\n  batch_size: 200\n  writers: 2\n  postgres:\n    dsn: " + pg.dsn() + "\n"));
  pid_t pid = 0;
  const char* argv[] = {SLUICE_BINARY,     "run",  "--config", config_path.c_str(),
                        "--until-drained", nullptr};
  const auto started = Clock::now();
  ASSERT_EQ(posix_spawn(&pid, SLUICE_BINARY, nullptr, nullptr, const_cast<char**>(argv), environ),
            0);
  int status = 0;
  rusage usage{};
  wait4(pid, &status, 0, &usage);
  const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  const double cpu = static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                     static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
  const auto counts = proxy.counts();
  std::string faults_seen;
  for (const auto& [key, n] : counts) faults_seen += " " + key + "=" + std::to_string(n);
  std::cout << "fault run: " << messages << " messages in " << seconds << " s, sluice CPU " << cpu
            << " s (" << cpu / messages * 1e6 << " us/message); requests and faults:" << faults_seen
            << "\n";
  EXPECT_GT(proxy.count("fault:InternalError"), 0u);
  EXPECT_GT(proxy.count("fault:ServiceUnavailable"), 0u);
  EXPECT_GT(proxy.count("fault:ThrottlingException"), 0u);
  EXPECT_GT(proxy.count("fault:reset"), 0u);
  EXPECT_EQ(pg.query("SELECT count(*) FROM " + table),
            std::to_string(events.distinct_records) + "\n");
  EXPECT_EQ(pg.query("SELECT count(DISTINCT hash) FROM " + table),
            std::to_string(events.distinct_records) + "\n");
  EXPECT_EQ(queue_total(url), 0);
  std::filesystem::remove(config_path);
}

// Acks hold their permits until the queue confirms them: at a small max_in_flight the
// pending deletes must go out as soon as intake waits for them, not at the batching
// interval (here an hour: without that, the container would stall after 5 messages).
TEST_F(FaultTest, PendingAcksAreSentAtOnceWhenIntakeWaitsForTheirPermits) {
  const std::string url = make_queue("fault-small-in-flight");
  publish(url, 100, 0.0);
  ContainerOptions options;
  options.name = "small-in-flight";
  options.max_in_flight = 5;
  std::atomic<int> handled{0};
  auto source = source_through(url, test::Emulator::shared().endpoint());
  source.delete_flush_interval = std::chrono::hours(1);
  Container container(options, make_sqs_source(source),
                      MessageHandler([&](Message&) { ++handled; }));
  container.start();
  const auto started = Clock::now();
  EXPECT_TRUE(test::wait_until([&] { return queue_total(url) == 0; }, 60s))
      << "acked " << container.stats().acked << ", handled " << handled.load();
  std::cout << "drained in " << std::chrono::duration<double>(Clock::now() - started).count()
            << " s; handled " << handled.load() << ", abandoned acks "
            << container.stats().failed_acks << "\n";
  container.stop();
  EXPECT_EQ(container.stats().acked, static_cast<std::uint64_t>(handled.load()));
}

// Before: heartbeats shared the connection pool with long polls and deletes. With the
// pool full of long polls (2 connections, 2 receives waiting 5 s on an empty queue),
// a heartbeat waited for a connection past the messages' 2 s visibility and they were
// delivered again. The heartbeat now has connections of its own.
TEST_F(FaultTest, HeartbeatsAreNotStarvedByLongPollsHoldingEveryConnection) {
  const std::string url = make_queue("fault-starved-heartbeat");
  publish(url, 10, 0.0);
  ContainerOptions options;
  options.name = "starved-heartbeat";
  options.max_in_flight = 100;  // the receives go on polling the (then empty) queue
  options.min_concurrent_receives = options.max_concurrent_receives = 2;
  options.worker_threads = 10;
  options.heartbeat_interval = 200ms;
  auto source = source_through(url, test::Emulator::shared().endpoint());
  source.client.http.max_connections_per_endpoint = 2;
  source.poll_wait = 5s;
  source.visibility_timeout = 2s;
  std::mutex m;
  std::map<std::string, int> seen;
  Container container(options, make_sqs_source(source), MessageHandler([&](Message& msg) {
                        {
                          std::lock_guard lock(m);
                          ++seen[std::string(msg.id())];
                        }
                        test::work_for(5s);  // held past 2 visibility timeouts
                      }));
  container.start();
  EXPECT_TRUE(test::wait_until([&] { return container.stats().acked == 10; }, 60s));
  container.stop();
  EXPECT_GT(container.stats().visibility_extensions, 0u) << "the heartbeat ran";
  EXPECT_EQ(seen.size(), 10u);
  for (const auto& [id, n] : seen) EXPECT_EQ(n, 1) << id << " was delivered again";
}

// Before: /readyz stayed 200 while every receive failed. It follows the receives now
// (and the writers), so an orchestrator stops routing work to a consumer that cannot
// reach its queue.
TEST_F(FaultTest, ReadinessFollowsFailingReceives) {
  const std::string url = make_queue("fault-readyz");
  test::HttpFaultProxy proxy("127.0.0.1", test::Emulator::shared().port(), {});
  // A free port for the metrics server, so that the test can ask it.
  boost::asio::io_context io;
  int port = 0;
  {
    boost::asio::ip::tcp::acceptor probe(
        io, {boost::asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(0)});
    port = probe.local_endpoint().port();
  }
  const std::string db = ::testing::TempDir() + "/readyz-" + std::to_string(getpid()) + ".db";
  std::string text = yaml(url, proxy.endpoint(), "sink:\n  sqlite:\n    path: " + db + "\n");
  text.replace(text.find("listen: 127.0.0.1:0"), 19, "listen: 127.0.0.1:" + std::to_string(port));
  const auto config = app::parse_config(text);
  app::RunSummary summary;
  std::thread runner([&] {
    app::RunOptions options;
    options.quiet = true;
    app::run_pipeline(config, options, summary);
  });
  aws::HttpClientOptions http_options;
  http_options.use_env_proxy = false;
  aws::HttpClient http(io.get_executor(), http_options);
  auto readyz = [&] {
    aws::HttpRequest r;
    r.url = aws::Url::parse("http://127.0.0.1:" + std::to_string(port) + "/readyz");
    try {
      return test::run(io, http.send(r)).status;
    } catch (const std::exception&) {
      return 0;  // not listening yet
    }
  };
  EXPECT_TRUE(test::wait_until([&] { return readyz() == 200; }, 20s)) << "ready once receiving";
  test::HttpFaults failing;
  failing.server_error = 1.0;
  failing.only_targets = {"ReceiveMessage"};
  proxy.set_faults(failing);
  EXPECT_TRUE(test::wait_until([&] { return readyz() == 503; }, 30s)) << "not ready while failing";
  EXPECT_GT(proxy.count("fault:InternalError"), 0u);
  proxy.set_faults({});
  EXPECT_TRUE(test::wait_until([&] { return readyz() == 200; }, 60s)) << "ready again";
  raise(SIGTERM);  // run_pipeline's own handler: a graceful stop
  runner.join();
  test::remove_sqlite(db);
}

// The same promise with MongoDB frozen: its driver has no interrupt, so the writer is
// abandoned at the interrupt deadline (exit 5) or the watchdog ends the process; either
// way within the deadline, and nothing is lost.
TEST_F(FaultTest, FrozenMongoDbStillExitsWithinTheDeadline) {
  const std::string mongo_uri = test::MongoWire::shared().uri();
  const auto port_at = mongo_uri.find("127.0.0.1:") + 10;
  const int mongo_port =
      std::stoi(mongo_uri.substr(port_at, mongo_uri.find('/', port_at) - port_at));
  test::TcpFaultProxy proxy("127.0.0.1", mongo_port);
  const std::string url = make_queue("fault-frozen-mongo");
  const auto events = publish(url, 3000, 0.0);
  const std::string collection = "frozen_" + std::to_string(getpid());
  auto sink = [&](int port) {
    return "sink:\n  type: mongodb\n  table: " + collection +
           "\n  batch_size: 50\n  mongodb:\n    uri: mongodb://127.0.0.1:" + std::to_string(port) +
           "/?directConnection=true\n    database: sluice_frozen\n    id_from_hash: true\n"
           "    write_concern: \"1\"\n";
  };
  const std::string config_path = write_config(
      "frozen-mongo", yaml(url, test::Emulator::shared().endpoint(), sink(proxy.port())));
  ASSERT_NO_FATAL_FAILURE(
      freeze_then_terminate(config_path, proxy, [&] { return queue_total(url) < 2900; }));
  const auto summary = run_until_drained(
      app::parse_config(yaml(url, test::Emulator::shared().endpoint(), sink(mongo_port))));
  EXPECT_EQ(summary.records_in_sink, events.distinct_records) << "nothing lost, nothing twice";
  EXPECT_EQ(queue_total(url), 0);
  std::filesystem::remove(config_path);
}
