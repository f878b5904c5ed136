// Traces against OpenTelemetry's own code: a loopback OTLP/HTTP receiver
// (tools/otel/receiver.mjs) decodes every export with OpenTelemetry's protobuf
// definitions; producers are a Node service using OpenTelemetry's JS SDK with its AWS
// SDK instrumentation, pika with W3C headers, and `sluice publish` with TRACEPARENT.
// Every Sluice process span must belong to its producer's trace, with the messaging
// conventions' attributes, and the collector being down or slow must cost the
// pipeline nothing but dropped (and counted) spans.
#include "sluice/tracing.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_future.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "observe/http_get.hpp"
#include "sluice/aws/http.hpp"
#include "sluice/container.hpp"
#include "sluice/sqs/publisher.hpp"
#include "support/fake_source.hpp"
#include "support/pipeline.hpp"
#include "support/process.hpp"
#include "support/rabbitmq.hpp"
#include "support/wait.hpp"

using namespace sluice;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

const std::string kSource = SLUICE_SOURCE_DIR;
const std::string kNode = kSource + "/tools/emulator/node_modules/.bin/node";

bool port_open(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return ok;
}

// The receiver, on a private port, writing the spans it decodes to a file.
class Receiver {
 public:
  explicit Receiver(const std::string& dir, std::vector<std::string> extra = {})
      : port_(test::free_port()), out_(dir + "/spans-" + std::to_string(port_) + ".jsonl") {
    std::vector<std::string> argv{kNode, kSource + "/tools/otel/receiver.mjs", out_, "--port",
                                  std::to_string(port_)};
    argv.insert(argv.end(), extra.begin(), extra.end());
    pid_ = test::spawn_quiet(argv);
    EXPECT_TRUE(test::wait_until([&] { return port_open(port_); }, 20s)) << "receiver started";
  }
  ~Receiver() {
    ::kill(pid_, SIGTERM);
    test::wait_exit(pid_);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::vector<json> spans() const {
    std::vector<json> all;
    std::ifstream in(out_);
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) all.push_back(json::parse(line));
    return all;
  }
  // Waits until `count` spans of `service` (and `kind`, if given) arrived.
  std::vector<json> wait_for(const std::string& service, std::size_t count,
                             const std::string& kind = "") const {
    std::vector<json> found;
    test::wait_until(
        [&] {
          found.clear();
          for (auto& s : spans())
            if (s["service"] == service && (kind.empty() || s["kind"] == kind)) found.push_back(s);
          return found.size() >= count;
        },
        30s);
    return found;
  }

 private:
  int port_;
  std::string out_;
  pid_t pid_ = -1;
};

class TracingPipeline : public test::PipelineFixture {
 protected:
  void SetUp() override {
    PipelineFixture::SetUp();
    dir_ = ::testing::TempDir() + "/sluice-tracing-" + std::to_string(getpid()) + "-" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // A pipeline config for `sluice run`: id and amount, the trace id stored.
  std::string config(const std::string& source_yaml, const std::string& tracing_yaml) {
    const std::string path = dir_ + "/pipeline.yaml";
    std::ofstream(path) << source_yaml << "normalize:\n  fields:\n"
                        << "    - {name: id, from: /id, required: true}\n"
                        << "    - {name: amount, from: /amount, type: integer}\n"
                        << "    - {name: messageId, meta: message_id}\n"
                        << "    - {name: traceId, meta: trace_id}\n"
                        << "identity:\n  version: V1\n  versions:\n    V1: [id]\n"
                        << "sink:\n  type: sqlite\n  sqlite:\n    path: " << dir_ << "/out.db\n"
                        << "metrics:\n  listen: \"\"\nlogging:\n  level: warn\n"
                        << tracing_yaml;
    return path;
  }
  std::string sqs_source(const std::string& queue) {
    return "source:\n  type: sqs\n  sqs:\n    queue_url: " + queue +
           "\n    endpoint_url: " + test::Emulator::shared().endpoint() +
           "\n    region: us-east-1\n    poll_wait: 1s\n";
  }
  // messageId -> traceId as stored.
  std::map<std::string, std::string> stored_traces() {
    std::map<std::string, std::string> rows;
    sqlite3* db = nullptr;
    EXPECT_EQ(sqlite3_open((dir_ + "/out.db").c_str(), &db), SQLITE_OK);
    sqlite3_stmt* st = nullptr;
    sqlite3_prepare_v2(db,
                       "SELECT json_extract(document, '$.messageId'), "
                       "json_extract(document, '$.traceId') FROM records",
                       -1, &st, nullptr);
    while (sqlite3_step(st) == SQLITE_ROW) {
      const auto* id = sqlite3_column_text(st, 0);
      const auto* trace = sqlite3_column_text(st, 1);
      rows[id ? reinterpret_cast<const char*>(id) : ""] =
          trace ? reinterpret_cast<const char*>(trace) : "";
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    return rows;
  }
  std::string run_sluice(const std::string& config_path) {
    const auto [code, out] = test::run_with_status(std::string(SLUICE_BINARY) + " run --config " +
                                                   config_path + " --until-drained 2>&1");
    EXPECT_EQ(code, 0) << out;
    return out;
  }
  // `count` bodies the config above stores, sent in batches.
  void publish_records(const std::string& queue, int count) {
    std::vector<sqs::SendMessageEntry> entries;
    for (int i = 0; i < count; ++i) {
      sqs::SendMessageEntry e;
      e.body = R"({"id":"r)" + std::to_string(i) + R"(","amount":)" + std::to_string(i) + "}";
      entries.push_back(std::move(e));
    }
    sqs::Publisher publisher(client_, queue);
    for (const auto& o : test::run(io_, publisher.send_batch(std::move(entries))))
      ASSERT_TRUE(o.ok) << o.error_message;
  }
  std::string dir_;
};

std::string span_key(const json& trace_id, const json& span_id) {
  return trace_id.get<std::string>() + "/" + span_id.get<std::string>();
}

}  // namespace

// The whole path: a Node service traced by OpenTelemetry's JS SDK sends 60 messages
// (SendMessageBatch, its AWS SDK instrumentation injecting each message's context);
// `sluice run` stores them; the receiver has both sides' spans.
TEST_F(TracingPipeline, ANodeProducersTraceContinuesIntoEveryProcessSpanAndRow) {
  Receiver receiver(dir_);
  const std::string queue = make_queue("traced");
  const auto sent =
      test::run_command(kNode + " " + kSource + "/tools/otel/producer.mjs " + queue + " 60 " +
                        receiver.url() + " " + test::Emulator::shared().endpoint() + " 2>&1");
  ASSERT_NE(sent.find("sent 60"), std::string::npos) << sent;
  const auto out =
      run_sluice(config(sqs_source(queue), "tracing:\n  otlp_endpoint: " + receiver.url() + "\n"));
  EXPECT_NE(out.find("traces "), std::string::npos) << out;

  // The producer's side: its SQS send spans (one per batch of 10).
  const auto sends = receiver.wait_for("node-producer", 6, "producer");
  ASSERT_EQ(sends.size(), 6u);
  std::set<std::string> send_spans;
  for (const auto& s : sends) {
    EXPECT_EQ(s["attributes"]["messaging.system"], "aws_sqs");
    send_spans.insert(span_key(s["trace_id"], s["span_id"]));
  }
  // Sluice's side: one process span per message, a child of its send span.
  const auto process = receiver.wait_for("sluice", 60, "consumer");
  ASSERT_EQ(process.size(), 60u);
  std::map<std::string, std::string> trace_of_message;
  std::set<std::string> process_spans;
  for (const auto& s : process) {
    EXPECT_EQ(send_spans.count(span_key(s["trace_id"], s["parent_span_id"])), 1u)
        << "the parent is the producer's send span: " << s.dump();
    const auto& a = s["attributes"];
    EXPECT_EQ(s["name"], "process " + queue.substr(queue.rfind('/') + 1));
    EXPECT_EQ(a["messaging.system"], "aws_sqs");
    EXPECT_EQ(a["messaging.operation.type"], "process");
    EXPECT_EQ(a["messaging.destination.name"], queue.substr(queue.rfind('/') + 1));
    EXPECT_EQ(a["sluice.outcome"], "ack");
    EXPECT_EQ(a["sluice.record"], "inserted");
    EXPECT_EQ(a["sluice.message.receive_count"], 1);
    EXPECT_GT(a["messaging.message.body.size"].get<int>(), 10);
    EXPECT_EQ(s["status"]["code"], 0);
    EXPECT_EQ(s["resource"]["service.name"], "sluice");
    EXPECT_EQ(s["content_type"], "application/x-protobuf");
    EXPECT_LE(std::stoull(s["start_ns"].get<std::string>()),
              std::stoull(s["end_ns"].get<std::string>()));
    trace_of_message[a["messaging.message.id"].get<std::string>()] = s["trace_id"];
    process_spans.insert(span_key(s["trace_id"], s["span_id"]));
  }
  EXPECT_EQ(trace_of_message.size(), 60u) << "one process span per message";
  // The receive spans link every message's producer.
  std::size_t linked = 0;
  for (const auto& s : receiver.spans()) {
    if (s["service"] != "sluice" || s["kind"] != "client" ||
        s["attributes"].value("messaging.operation.type", "") != "receive")
      continue;
    EXPECT_EQ(s["attributes"]["messaging.batch.message_count"].get<std::size_t>(),
              s["links"].size());
    for (const auto& l : s["links"]) {
      EXPECT_EQ(send_spans.count(span_key(l["trace_id"], l["span_id"])), 1u) << l.dump();
      EXPECT_TRUE(trace_of_message.count(l["attributes"]["messaging.message.id"]));
      ++linked;
    }
  }
  EXPECT_EQ(linked, 60u);
  // The batch writes link the process spans of the messages they carried.
  std::set<std::string> written;
  for (const auto& s : receiver.spans())
    if (s["service"] == "sluice" && s["attributes"].contains("db.system.name")) {
      EXPECT_EQ(s["name"], "INSERT records");
      EXPECT_EQ(s["attributes"]["db.system.name"], "sqlite");
      EXPECT_EQ(s["attributes"]["db.operation.batch.size"].get<std::size_t>(), s["links"].size());
      for (const auto& l : s["links"]) written.insert(span_key(l["trace_id"], l["span_id"]));
    }
  EXPECT_EQ(written, process_spans);
  // And each row keeps its trace.
  EXPECT_EQ(stored_traces(), trace_of_message);
}

// RabbitMQ: W3C headers from pika; tracestate passed on; the parent is each message's own.
TEST_F(TracingPipeline, TraceparentHeadersFromPikaAreTheParentsOfRabbitMqProcessSpans) {
  auto& rabbit = test::RabbitMq::shared();
  const std::string queue = "traced-" + std::to_string(getpid());
  test::run_command(std::string(SLUICE_BINARY) + " queue create --amqp-url '" + rabbit.uri() +
                    "' --name " + queue);
  const std::string trace = "4bf92f3577b34da6a3ce929d0e0e4736";
  test::run_command("/usr/bin/python3 " + kSource + "/tests/tools/pika_publish.py '" +
                    rabbit.uri() + "' " + queue + " 20 " + trace);
  // And `sluice publish` with the caller's TRACEPARENT: the headers too.
  std::ofstream(dir_ + "/one.jsonl") << R"({"id":"from-sluice","amount":1})"
                                     << "\n";
  test::run_command("TRACEPARENT=00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01 " +
                    std::string(SLUICE_BINARY) + " publish --amqp-url '" + rabbit.uri() +
                    "' --routing-key " + queue + " --file " + dir_ + "/one.jsonl 2>&1");
  Receiver receiver(dir_);
  run_sluice(config("source:\n  type: rabbitmq\n  rabbitmq:\n    url: " + rabbit.uri() +
                        "\n    queue: " + queue + "\n",
                    "tracing:\n  otlp_endpoint: " + receiver.url() + "\n  sampling_ratio: 0\n"));
  auto process = receiver.wait_for("sluice", 21, "consumer");
  ASSERT_EQ(process.size(), 21u) << "sampled by the producers, whatever the ratio";
  const auto published = std::find_if(process.begin(), process.end(), [](const json& s) {
    return s["trace_id"] == "0af7651916cd43dd8448eb211c80319c";
  });
  ASSERT_NE(published, process.end()) << "sluice publish passed TRACEPARENT on";
  EXPECT_EQ((*published)["parent_span_id"], "b7ad6b7169203331");
  process.erase(published);
  std::set<std::string> parents;
  for (const auto& s : process) {
    EXPECT_EQ(s["trace_id"], trace);
    EXPECT_EQ(s["trace_state"], "vendor=pika");
    EXPECT_EQ(s["attributes"]["messaging.system"], "rabbitmq");
    EXPECT_EQ(s["attributes"]["messaging.destination.name"], queue);
    EXPECT_EQ(s["attributes"]["sluice.outcome"], "ack");
    const int n = std::stoi(s["attributes"]["messaging.message.id"].get<std::string>().substr(5));
    EXPECT_EQ(std::stoi(s["parent_span_id"].get<std::string>(), nullptr, 16), n + 1) << s.dump();
    parents.insert(s["parent_span_id"]);
  }
  EXPECT_EQ(parents.size(), 20u);
  for (const auto& [id, stored] : stored_traces()) {
    if (id.starts_with("pika-")) {
      EXPECT_EQ(stored, trace) << id;
    }
  }
}

// `sluice publish` passes the caller's TRACEPARENT on (as W3C attributes here: the
// emulator keeps no AWSTraceHeader); with producer_as_parent off the process span
// starts its own trace and links to the producer's.
TEST_F(TracingPipeline, PublishPassesTheCallersTraceOnAndLinksWhenNotAParent) {
  Receiver receiver(dir_);
  const std::string queue = make_queue("traced-publish");
  const std::string traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
  std::ofstream(dir_ + "/events.jsonl") << R"({"id":"a","amount":1})"
                                        << "\n"
                                        << R"({"id":"b","amount":2})"
                                        << "\n"
                                        << R"({"id":"a","amount":1})"
                                        << "\n"  // a duplicate
                                        << R"({"amount":3})"
                                        << "\n";  // no id: rejected
  test::run_command("TRACEPARENT=" + traceparent + " " + SLUICE_BINARY +
                    " publish --trace-carrier traceparent --queue-url " + queue +
                    " --endpoint-url " + test::Emulator::shared().endpoint() +
                    " --region us-east-1 --file " + dir_ + "/events.jsonl 2>&1");
  const auto bad = test::run_with_status(std::string("TRACEPARENT=00-ABC ") + SLUICE_BINARY +
                                         " publish --queue-url " + queue + " --file " + dir_ +
                                         "/events.jsonl 2>&1");
  EXPECT_EQ(bad.first, 2);
  EXPECT_NE(bad.second.find("TRACEPARENT: got '00-ABC', expected a W3C traceparent"),
            std::string::npos)
      << bad.second;
  const auto bad_state = test::run_with_status(
      "TRACEPARENT=" + traceparent + " TRACESTATE='bad key=@@,,' " + SLUICE_BINARY +
      " publish --queue-url " + queue + " --file " + dir_ + "/events.jsonl 2>&1");
  EXPECT_EQ(bad_state.first, 2) << bad_state.second;
  EXPECT_NE(bad_state.second.find("TRACESTATE: got 'bad key=@@,,', expected a W3C tracestate"),
            std::string::npos)
      << bad_state.second;
  const auto out =
      run_sluice(config(sqs_source(queue), "tracing:\n  otlp_endpoint: " + receiver.url() +
                                               "\n  producer_as_parent: false\n"));
  const auto process = receiver.wait_for("sluice", 4, "consumer");
  ASSERT_EQ(process.size(), 4u);
  std::map<std::string, int> records;
  for (const auto& s : process) {
    const auto& a = s["attributes"];
    const std::string record = a.value("sluice.record", "");
    ++records[record];
    EXPECT_EQ(a["sluice.outcome"], "ack") << "kept in the rejects table, then acked";
    if (record == "rejected") {
      EXPECT_EQ(a["sluice.reject.reason"], "validation");
      EXPECT_EQ(a["error.type"], "validation");
      EXPECT_EQ(s["status"]["code"], 2);
      EXPECT_NE(s["status"]["message"].get<std::string>().find("id"), std::string::npos);
      // Its log line carries its trace.
      EXPECT_NE(out.find("event=rejected pipeline=default reason=validation message_id=" +
                         a["messaging.message.id"].get<std::string>() +
                         " trace_id=" + s["trace_id"].get<std::string>()),
                std::string::npos)
          << out;
    } else {
      EXPECT_EQ(s["status"]["code"], 0);
    }
    EXPECT_NE(s["trace_id"], "0af7651916cd43dd8448eb211c80319c") << "a trace of its own";
    EXPECT_EQ(s["parent_span_id"], "");
    ASSERT_EQ(s["links"].size(), 1u);
    EXPECT_EQ(s["links"][0]["trace_id"], "0af7651916cd43dd8448eb211c80319c");
    EXPECT_EQ(s["links"][0]["span_id"], "b7ad6b7169203331");
  }
  EXPECT_EQ(records,
            (std::map<std::string, int>{{"inserted", 2}, {"duplicate", 1}, {"rejected", 1}}));
}

// The AWSTraceHeader system attribute end to end through an SQS server that keeps it,
// as SQS does (local-aws-sqs; fauxqs drops it, so there the test is skipped): `sluice
// publish` writes the caller's TRACEPARENT into it (its default carrier, no message
// attribute spent), and each process span is the producer's child.
TEST_F(TracingPipeline, AnAwsTraceHeaderCrossesTheServerIntoEveryProcessSpan) {
  if (test::Emulator::server_name() == "fauxqs")
    GTEST_SKIP() << "fauxqs keeps no AWSTraceHeader; integration.SecondSqsServer runs this on "
                    "local-aws-sqs";
  Receiver receiver(dir_);
  const std::string queue = make_queue("xray-publish");
  std::ofstream(dir_ + "/events.jsonl") << R"({"id":"a","amount":1})"
                                        << "\n"
                                        << R"({"id":"b","amount":2})"
                                        << "\n";
  test::run_command("TRACEPARENT=00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01 " +
                    std::string(SLUICE_BINARY) + " publish --queue-url " + queue +
                    " --endpoint-url " + test::Emulator::shared().endpoint() +
                    " --region us-east-1 --file " + dir_ + "/events.jsonl 2>&1");
  {  // On the queue as the system attribute, not as a message attribute.
    sqs::ReceiveMessageRequest r;
    r.queue_url = queue;
    r.max_messages = 10;
    r.visibility_timeout = 0;
    const auto peeked = test::run(io_, client_->receive_message(r));
    ASSERT_FALSE(peeked.empty());
    EXPECT_EQ(peeked[0].attributes.at("AWSTraceHeader"),
              "Root=1-0af76519-16cd43dd8448eb211c80319c;Parent=b7ad6b7169203331;Sampled=1");
    EXPECT_TRUE(peeked[0].message_attributes.empty());
  }
  run_sluice(config(sqs_source(queue), "tracing:\n  otlp_endpoint: " + receiver.url() + "\n"));
  const auto process = receiver.wait_for("sluice", 2, "consumer");
  ASSERT_EQ(process.size(), 2u);
  for (const auto& span : process) {
    EXPECT_EQ(span["trace_id"], "0af7651916cd43dd8448eb211c80319c");
    EXPECT_EQ(span["parent_span_id"], "b7ad6b7169203331");
  }
  const auto rows = stored_traces();
  EXPECT_EQ(rows.size(), 2u);
  for (const auto& [message_id, trace] : rows)
    EXPECT_EQ(trace, "0af7651916cd43dd8448eb211c80319c") << message_id;
}

// The core, for any source: AWSTraceHeader (X-Ray's format) and traceparent both read,
// an unsampled producer followed, the context current while a handler runs (what the
// publishers inject), a reject's reason on its span.
TEST_F(TracingPipeline, TheContainerReadsEitherCarrierAndFollowsTheProducersSampling) {
  Receiver receiver(dir_);
  tracing::TracerOptions options;
  options.otlp_endpoint = receiver.url();
  options.export_interval = 100ms;
  auto tracer = tracing::Tracer::make(options);
  auto queue = std::make_shared<test::FakeQueue>();
  queue->push({"xray",
               {},
               false,
               {{"AWSTraceHeader",
                 "Root=1-5759e988-bd862e3fe1be46a994272793;Parent="
                 "53995c3f42cd8ad8;Sampled=1"}},
               {}});
  queue->push({"w3c",
               {},
               false,
               {},
               {{"traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}});
  queue->push({"unsampled",
               {},
               false,
               {},
               {{"traceparent", "00-11111111111111111111111111111111-2222222222222222-00"}}});
  queue->push({"bad", {}, false, {}, {}});
  // Of a group, failed: its span says retried.
  queue->push({"retried",
               std::string("g1"),
               false,
               {},
               {{"traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}});
  std::mutex m;
  std::map<std::string, std::string> current_in_handler;  // body -> traceparent seen
  // A handler that sends on, as a relay would: the library publisher carries the trace.
  const std::string onward = make_queue("traced-onward");
  sqs::PublisherOptions publishing;
  publishing.trace_carrier = sqs::PublisherOptions::TraceCarrier::traceparent;
  sqs::Publisher publisher(client_, onward, publishing);
  ContainerOptions o;
  o.worker_threads = 2;
  Container container(o, test::fake_source(queue), [&](Message& message) {
    {
      std::lock_guard lock(m);
      const auto* current = tracing::current();
      current_in_handler[message.body()] = current ? tracing::format_traceparent(*current) : "";
    }
    // What a publisher does with it: the SQS system attribute.
    if (message.body() == "xray") {
      sqs::SendMessageEntry entry;
      sqs::inject_trace(entry, *tracing::current(),
                        sqs::PublisherOptions::TraceCarrier::aws_trace_header);
      std::lock_guard lock(m);
      current_in_handler["xray-sent"] = entry.aws_trace_header;
    }
    if (message.body() == "bad") message.reject("validation: no id");
    if (message.body() == "retried") throw std::runtime_error("the first attempt fails");
    if (message.body() == "w3c") {
      sqs::SendMessageEntry entry;
      entry.body = "onward";
      // The publisher's coroutine runs later, on another thread (the client's
      // io_context, run here by a thread of its own): the context that counts is the one
      // of the thread that called send().
      auto sent =
          boost::asio::co_spawn(io_, publisher.send(std::move(entry)), boost::asio::use_future);
      std::thread runner([&] {
        io_.restart();
        io_.run();
      });
      runner.join();
      sent.get();
    }
  });
  container.set_tracer(tracer);
  container.start();
  ASSERT_TRUE(test::wait_until([&] { return queue->count(queue->acked) == 3; }, 10s));
  ASSERT_TRUE(test::wait_until([&] { return queue->count(queue->rejected) == 1; }, 10s));
  ASSERT_TRUE(test::wait_until([&] { return queue->count(queue->retried) == 1; }, 10s));
  container.stop();
  tracer->shutdown(5s);
  const auto process = receiver.wait_for("sluice", 4, "consumer");
  std::map<std::string, json> by_body;
  for (const auto& s : process) by_body[s["attributes"]["messaging.message.id"]] = s;
  ASSERT_EQ(by_body.size(), 4u) << "the unsampled producer's message records nothing";
  const auto& failed = by_body["retried"];
  EXPECT_EQ(failed["attributes"]["sluice.outcome"], "retry");
  EXPECT_EQ(failed["attributes"]["error.type"], "retried");
  EXPECT_EQ(failed["status"]["code"], 2);
  EXPECT_EQ(failed["attributes"]["sluice.message.group"], "g1");
  EXPECT_EQ(failed["attributes"]["sluice.message.receive_count"], 1);
  EXPECT_EQ(failed["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(failed["parent_span_id"], "00f067aa0ba902b7");
  EXPECT_EQ(by_body["xray"]["trace_id"], "5759e988bd862e3fe1be46a994272793");
  EXPECT_EQ(by_body["xray"]["parent_span_id"], "53995c3f42cd8ad8");
  EXPECT_EQ(by_body["w3c"]["trace_id"], "0af7651916cd43dd8448eb211c80319c");
  EXPECT_EQ(by_body["w3c"]["parent_span_id"], "b7ad6b7169203331");
  EXPECT_EQ(by_body["w3c"]["attributes"]["messaging.system"], "fake");
  EXPECT_EQ(by_body["bad"]["attributes"]["sluice.outcome"], "reject");
  EXPECT_EQ(by_body["bad"]["attributes"]["sluice.reject.reason"], "validation: no id");
  EXPECT_EQ(by_body["bad"]["status"]["code"], 2);
  EXPECT_EQ(by_body["bad"]["parent_span_id"], "") << "no producer: a root";
  std::lock_guard lock(m);
  EXPECT_EQ(current_in_handler["w3c"], "00-0af7651916cd43dd8448eb211c80319c-" +
                                           by_body["w3c"]["span_id"].get<std::string>() + "-01");
  EXPECT_EQ(current_in_handler["unsampled"].substr(0, 36), "00-11111111111111111111111111111111-");
  EXPECT_TRUE(current_in_handler["unsampled"].ends_with("-00")) << "passed on unsampled";
  EXPECT_EQ(current_in_handler["xray-sent"], "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=" +
                                                 by_body["xray"]["span_id"].get<std::string>() +
                                                 ";Sampled=1");
  // What the handler sent carries the w3c message's process span as its parent.
  sqs::ReceiveMessageRequest request;
  request.queue_url = onward;
  request.wait_time_seconds = 1;
  const auto received = test::run(io_, client_->receive_message(request));
  ASSERT_EQ(received.size(), 1u);
  EXPECT_EQ(received[0].message_attributes.at("traceparent").string_value,
            "00-0af7651916cd43dd8448eb211c80319c-" + by_body["w3c"]["span_id"].get<std::string>() +
                "-01");
  const auto stats = tracer->stats();
  EXPECT_EQ(stats.spans_dropped, 0u);
  EXPECT_EQ(stats.spans_exported, stats.spans_started);
}

// A collector that is down, then one that answers 10 s late with a queue of 50: the
// pipeline drains as ever, the spans it could not send are dropped and counted.
TEST_F(TracingPipeline, ACollectorDownOrSlowDropsAndCountsSpansAndHoldsNothingUp) {
  const std::string queue = make_queue("traced-down");
  publish_records(queue, 1000);
  const int closed = test::free_port();
  std::string source = sqs_source(queue);
  auto out = run_sluice(config(
      source, "tracing:\n  otlp_endpoint: http://127.0.0.1:" + std::to_string(closed) + "\n"));
  EXPECT_NE(out.find("records in sink     1000"), std::string::npos) << out;
  EXPECT_NE(out.find(" 0 spans exported, "), std::string::npos) << out;
  EXPECT_EQ(out.find(" 0 dropped"), std::string::npos) << "the spans are counted dropped: " << out;
  EXPECT_EQ(out.find(" 0 failed exports"), std::string::npos) << out;

  Receiver slow(dir_, {"--delay-ms", "10000"});
  const std::string queue2 = make_queue("traced-slow");
  publish_records(queue2, 1000);
  std::filesystem::remove(dir_ + "/out.db");
  const auto started = std::chrono::steady_clock::now();
  out = run_sluice(config(sqs_source(queue2), "tracing:\n  otlp_endpoint: " + slow.url() +
                                                  "\n  max_queue_spans: 50\n"));
  EXPECT_NE(out.find("records in sink     1000"), std::string::npos) << out;
  EXPECT_NE(out.find(" 0 spans exported, "), std::string::npos) << out;
  EXPECT_EQ(out.find(" 0 dropped"), std::string::npos) << out;
  // The stop waits at most a second for the exporter, not the collector's 10.
  EXPECT_LT(std::chrono::steady_clock::now() - started, 60s);
}

// `sluice top` in a real terminal (tmux) against a live pipeline: the screen shows what
// /metrics says, follows a resize to a narrow window, and q ends it; piped, it prints
// plain lines.
TEST_F(TracingPipeline, TopShowsTheLivePipelinesFiguresInATerminalAndQuitsOnQ) {
  const std::string queue = make_queue("top");
  publish_records(queue, 200);
  {
    std::vector<sqs::SendMessageEntry> bad(10);
    for (auto& e : bad) e.body = R"({"amount":1})";  // no id: rejected, validation
    sqs::Publisher publisher(client_, queue);
    for (const auto& o : test::run(io_, publisher.send_batch(std::move(bad)))) ASSERT_TRUE(o.ok);
  }
  const int port = test::free_port();
  const std::string path = config(sqs_source(queue), "");
  {
    std::string text;
    std::ifstream in(path);
    std::stringstream all;
    all << in.rdbuf();
    text = all.str();
    text.replace(text.find("listen: \"\""), 10, "listen: 127.0.0.1:" + std::to_string(port));
    text.replace(text.find("source:\n  type: sqs\n"), 20,
                 "source:\n  type: sqs\n  max_in_flight: 250\n");
    std::ofstream(path) << text;
  }
  const pid_t sluice = test::spawn_quiet({SLUICE_BINARY, "run", "--config", path});
  const std::string url = "http://127.0.0.1:" + std::to_string(port);
  const std::string tmux = "tmux -L sluice-top-" + std::to_string(getpid());
  struct Stop {
    pid_t pid;
    std::string tmux;
    ~Stop() {
      std::system((tmux + " kill-server 2>/dev/null").c_str());
      ::kill(pid, SIGTERM);
      test::wait_exit(pid);
    }
  } stop{sluice, tmux};
  // Until the pipeline has done its work (its own /metrics says so).
  auto scrape = [&]() -> std::string {
    const auto local_url = observe::parse_local_url(url + "/metrics");
    try {
      return observe::http_request(local_url).body;
    } catch (const std::exception&) {
      return {};
    }
  };
  ASSERT_TRUE(test::wait_until(
      [&] {
        const auto m = scrape();
        return m.find("sluice_records_written_total{pipeline=\"default\"} 200") !=
                   std::string::npos &&
               m.find(
                   "sluice_messages_rejected_total{pipeline=\"default\",reason=\"validation\"} "
                   "10") != std::string::npos;
      },
      60s))
      << scrape();
  test::run_command(tmux + " new-session -d -s top -x 110 -y 30 \"" + SLUICE_BINARY +
                    " top --url " + url + " --interval 300ms\"");
  auto screen = [&] { return test::run_with_status(tmux + " capture-pane -p -t top").second; };
  ASSERT_TRUE(
      test::wait_until([&] { return screen().find("written 200") != std::string::npos; }, 20s))
      << screen();
  const auto shown = screen();
  EXPECT_NE(shown.find("sluice top  " + url + "/metrics"), std::string::npos) << shown;
  EXPECT_NE(shown.find("default  running  ready"), std::string::npos) << shown;
  EXPECT_NE(shown.find("total      received 210  written 200  duplicates 0  rejected 10"),
            std::string::npos)
      << shown;
  EXPECT_NE(shown.find("in flight  0 / 250"), std::string::npos) << shown;
  EXPECT_NE(shown.find("rejects    validation 10 (0/s)"), std::string::npos) << shown;
  // The backlog, as the queue's probe reads it (every few seconds).
  EXPECT_TRUE(test::wait_until(
      [&] { return screen().find("backlog    visible 0  in flight 0") != std::string::npos; }, 20s))
      << screen();
  {
    // Every row of the view is there: latencies per stage, the queue's oldest message,
    // the receives, the throughput's sparkline.
    const auto full = screen();
    for (const char* row : {"  p50/p99    receive ", "  handler ", "  sink batch ", "  oldest ",
                            "  acks pending ", "  receives ", "  received/s "})
      EXPECT_NE(full.find(row), std::string::npos) << row << " missing:\n" << full;
  }
  // A narrow window: every line cut to it, still running.
  test::run_command(tmux + " resize-window -t top -x 40 -y 20");
  ASSERT_TRUE(test::wait_until(
      [&] {
        const auto narrow = screen();
        if (narrow.find("rejected 10") != std::string::npos ||
            narrow.find("total      received 210") == std::string::npos)
          return false;
        std::istringstream lines(narrow);
        for (std::string line; std::getline(lines, line);)
          if (line.size() > 40) return false;
        return true;
      },
      10s))
      << screen();
  // q quits: the session (whose only program it was) ends.
  test::run_command(tmux + " send-keys -t top q");
  EXPECT_TRUE(test::wait_until(
      [&] { return test::run_with_status(tmux + " has-session -t top 2>&1").first != 0; }, 5s));
  // From the pipeline's own configuration (its metrics.listen), ended by Ctrl-C.
  test::run_command(tmux + " new-session -d -s config -x 110 -y 30 \"" + SLUICE_BINARY +
                    " top --config " + path + " --interval 300ms\"");
  ASSERT_TRUE(test::wait_until(
      [&] {
        return test::run_with_status(tmux + " capture-pane -p -t config")
                   .second.find("written 200") != std::string::npos;
      },
      20s))
      << test::run_with_status(tmux + " capture-pane -p -t config").second;
  test::run_command(tmux + " send-keys -t config C-c");
  EXPECT_TRUE(test::wait_until(
      [&] { return test::run_with_status(tmux + " has-session -t config 2>&1").first != 0; }, 5s))
      << "Ctrl-C did not end sluice top";
  // A terminal type this machine does not know (a new terminal over SSH): plain lines.
  test::run_command(tmux + " new-session -d -s unknown -x 200 -y 30 \"TERM=nosuchterm " +
                    SLUICE_BINARY + " top --url " + url +
                    " --interval 200ms --iterations 2; sleep 30\"");
  EXPECT_TRUE(test::wait_until(
      [&] {
        const auto s = test::run_with_status(tmux + " capture-pane -p -t unknown").second;
        return s.find("(TERM=nosuchterm) is not known here: plain lines instead") !=
                   std::string::npos &&
               s.find("pipeline=default state=running") != std::string::npos;
      },
      10s))
      << test::run_with_status(tmux + " capture-pane -p -t unknown").second;
  // Piped: plain lines.
  const auto plain = test::run_with_status(std::string(SLUICE_BINARY) + " top --url " + url +
                                           " --interval 200ms --iterations 2 | cat");
  EXPECT_EQ(plain.first, 0) << plain.second;
  EXPECT_NE(plain.second.find("pipeline=default state=running ready=1"), std::string::npos)
      << plain.second;
  EXPECT_NE(plain.second.find("written=200 rejected=10 in_flight=0/250"), std::string::npos)
      << plain.second;
  // Not on a terminal, a SIGTERM ends it at once, not at its next refresh an hour away
  // (timeout sends TERM after 2 s, KILL 30 s later: 124 is TERM obeyed, 137 is not).
  const auto termed =
      test::run_with_status("timeout -s TERM -k 30 2 " + std::string(SLUICE_BINARY) +
                            " top --url " + url + " --interval 1h >/dev/null; echo $?");
  EXPECT_EQ(termed.second, "124\n") << "sluice top ignored SIGTERM";
  // Another program's metrics: said, exit code 1 (not an idle pipeline).
  {
    const std::string other = dir_ + "/other";
    std::filesystem::create_directories(other);
    std::ofstream(other + "/metrics") << "# TYPE foo_total counter\nfoo_total 3\n";
    const int other_port = test::free_port();
    const pid_t server =
        test::spawn_quiet({"/usr/bin/python3", "-m", "http.server", "--bind", "127.0.0.1",
                           std::to_string(other_port), "--directory", other});
    const std::string other_url = "http://127.0.0.1:" + std::to_string(other_port);
    std::pair<int, std::string> shown_other;
    test::wait_until(
        [&] {
          shown_other = test::run_with_status(std::string(SLUICE_BINARY) + " top --url " +
                                              other_url + " --iterations 1 2>&1");
          return shown_other.second.find("Connection refused") == std::string::npos &&
                 shown_other.second.find("connect") == std::string::npos;
        },
        10s);
    ::kill(server, SIGTERM);
    test::wait_exit(server);
    EXPECT_EQ(shown_other.first, 1) << shown_other.second;
    EXPECT_NE(shown_other.second.find("no Sluice series"), std::string::npos) << shown_other.second;
  }
  // Nothing there: said, exit code 1.
  const auto none =
      test::run_with_status(std::string(SLUICE_BINARY) + " top --url http://127.0.0.1:" +
                            std::to_string(test::free_port()) + " 2>&1");
  EXPECT_EQ(none.first, 1) << none.second;
  EXPECT_NE(none.second.find("sluice top: http://127.0.0.1:"), std::string::npos) << none.second;
}
