// Large payloads through S3 and SNS fan-out, against the emulator's real S3 and SNS
// (fauxqs serves SQS, S3 and SNS on one endpoint): the S3 client, the publisher's
// pointers in the Java extended client's exact format, the source resolving them
// within a byte budget, `sluice run` with 5% of events above 1 MiB, and a topic fanning
// out to two queues drained by two pipelines.
#include "sluice/sqs/large_payload.hpp"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <mutex>
#include <regex>
#include <set>

#include "app/run.hpp"
#include "cli/publish.hpp"
#include "config/config.hpp"
#include "sluice/aws/error.hpp"
#include "sluice/container.hpp"
#include "sluice/s3/client.hpp"
#include "sluice/sns/client.hpp"
#include "sluice/sqs/publisher.hpp"
#include "sluice/sqs/source.hpp"
#include "support/fault_proxy.hpp"
#include "support/pipeline.hpp"
#include "support/process.hpp"
#include "support/wait.hpp"
#include "support/work.hpp"

using namespace sluice;
using namespace std::chrono_literals;
using test::Emulator;

namespace {

std::string bucket_name(const std::string& prefix) {
  static std::atomic<int> n{0};
  return prefix + "-" + std::to_string(getpid()) + "-" + std::to_string(++n);
}

s3::S3ClientOptions emulator_s3() {
  s3::S3ClientOptions o;
  o.endpoint_url = Emulator::shared().endpoint();
  o.region = "us-east-1";
  o.credentials = aws::make_static_credentials({"AKIDLOCAL", "local-secret", "", {}, "test"});
  o.http.use_env_proxy = false;
  o.addressing = s3::AddressingStyle::path;
  return o;
}

std::string pattern_body(std::size_t size, char seed) {
  std::string body(size, ' ');
  for (std::size_t i = 0; i < size; ++i) body[i] = static_cast<char>('a' + (i * 7 + seed) % 26);
  return body;
}

// One SQL answer (first column of each row) from a SQLite file.
std::vector<std::string> sqlite_column(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  std::vector<std::string> out;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    sqlite3_close(db);
    ADD_FAILURE() << "cannot open " << path;
    return out;
  }
  // The pipeline's last connection checkpoints the WAL as it closes: wait for its lock
  // (a failed run seen under a loaded machine: "database is locked").
  sqlite3_busy_timeout(db, 10000);
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr) == SQLITE_OK)
    while (sqlite3_step(stmt) == SQLITE_ROW) {
      const auto* text = sqlite3_column_text(stmt, 0);
      out.emplace_back(text ? reinterpret_cast<const char*>(text) : "");
    }
  else
    ADD_FAILURE() << sqlite3_errmsg(db) << ": " << sql;
  sqlite3_finalize(stmt);
  sqlite3_close(db);
  return out;
}

class LargePayload : public test::PipelineFixture {
 protected:
  void SetUp() override {
    PipelineFixture::SetUp();
    s3_ = std::make_shared<s3::S3Client>(io_.get_executor(), emulator_s3());
  }
  std::string make_bucket(const std::string& prefix) {
    const std::string bucket = bucket_name(prefix);
    test::run(io_, s3_->create_bucket(bucket));
    return bucket;
  }
  // Stores `payload` and sends the pointer exactly as a Java or Python extended client
  // would (the pointer text and the size attribute are given).
  void send_pointer(const std::string& url, const std::string& pointer_text,
                    const std::string& size_attribute, std::size_t size) {
    sqs::SendMessageEntry e;
    e.body = pointer_text;
    e.message_attributes[size_attribute] = sqs::MessageAttributeValue::number(std::to_string(size));
    test::run(io_, client_->send_message(url, e));
  }
  std::string get(const std::string& bucket, const std::string& key) {
    return test::run(io_, s3_->get_object(bucket, key));
  }
  std::shared_ptr<s3::S3Client> s3_;
};

sqs::LargePayloadOptions receiving(std::uint64_t budget) {
  sqs::LargePayloadOptions o;
  o.enabled = true;
  o.s3 = emulator_s3();
  o.max_bytes_in_flight = budget;
  return o;
}

SqsSourceOptions source_options(const std::string& url) {
  SqsSourceOptions o;
  o.queue_url = url;
  o.client = test::emulator_client_options();
  o.poll_wait = 1s;
  o.delete_flush_interval = 20ms;
  return o;
}

}  // namespace

TEST_F(LargePayload, S3ClientStoresFetchesAndDeletesObjects) {
  const std::string bucket = make_bucket("objects");
  const std::string key = "dir/a key+with spaces/é中文~!.json";
  const std::string body = pattern_body(3 * 1024 * 1024 + 17, 3);
  EXPECT_FALSE(test::run(io_, s3_->put_object(bucket, key, body)).empty()) << "an ETag";
  EXPECT_EQ(get(bucket, key), body);
  test::run(io_, s3_->delete_object(bucket, key));
  try {
    get(bucket, key);
    FAIL() << "a deleted object was fetched";
  } catch (const aws::AwsError& e) {
    EXPECT_EQ(e.code(), "NoSuchKey") << e.what();
    EXPECT_EQ(e.kind(), aws::ErrorKind::client);
    EXPECT_EQ(e.http_status(), 404);
  }
  try {
    test::run(io_, s3_->get_object("no-such-bucket-" + std::to_string(getpid()), "k"));
    FAIL() << "an object of a missing bucket was fetched";
  } catch (const aws::AwsError& e) {
    EXPECT_EQ(e.code(), "NoSuchBucket") << e.what();
  }
}

TEST_F(LargePayload, PublisherSendsTheJavaClientsPointerOverTheThreshold) {
  const std::string url = make_queue("lp-publish");
  const std::string bucket = make_bucket("publish");
  sqs::PublisherOptions options;
  options.large_payloads.enabled = true;
  options.large_payloads.bucket = bucket;
  options.large_payloads.s3 = emulator_s3();
  options.large_payloads.threshold = 0;  // the queue's MaximumMessageSize
  sqs::Publisher publisher(client_, url, options);
  const auto attributes = test::run(io_, client_->get_queue_attributes(url));
  const std::size_t maximum = std::stoul(attributes.at("MaximumMessageSize"));
  const std::string small = pattern_body(maximum - 100, 1);  // inline, just under
  const std::string large = pattern_body(maximum + 1, 2);    // through S3, just over
  const std::string huge = pattern_body(5 * 1024 * 1024, 4);
  test::run(io_, publisher.send({"", small, {}, {}, {}, {}, {}}));
  std::vector<sqs::SendMessageEntry> batch;
  batch.push_back({"", large, {}, {}, {}, {}, {}});
  batch.push_back({"", huge, {}, {}, {}, {}, {}});
  for (const auto& o : test::run(io_, publisher.send_batch(std::move(batch))))
    EXPECT_TRUE(o.ok) << o.error_code << " " << o.error_message;

  std::map<std::size_t, sqs::Message> by_size;  // by the payload's real size
  for (int round = 0; round < 20 && by_size.size() < 3; ++round) {
    sqs::ReceiveMessageRequest r;
    r.queue_url = url;
    r.wait_time_seconds = 1;
    for (auto& m : test::run(io_, client_->receive_message(r))) {
      auto it = m.message_attributes.find("ExtendedPayloadSize");
      const std::size_t size =
          it == m.message_attributes.end() ? m.body.size() : std::stoul(it->second.string_value);
      by_size[size] = m;
    }
  }
  ASSERT_EQ(by_size.size(), 3u);
  EXPECT_EQ(by_size.at(small.size()).body, small) << "under the threshold: inline";
  const std::regex java_pointer(
      R"re(^\["software\.amazon\.payloadoffloading\.PayloadS3Pointer",\{"s3BucketName":")re" +
      bucket +
      R"re(","s3Key":"([0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12})"\}\]$)re");
  for (const std::string* payload : {&large, &huge}) {
    const auto& m = by_size.at(payload->size());
    std::smatch match;
    ASSERT_TRUE(std::regex_match(m.body, match, java_pointer)) << m.body;
    EXPECT_EQ(m.message_attributes.at("ExtendedPayloadSize").data_type, "Number");
    EXPECT_EQ(get(bucket, match[1].str()), *payload);
  }
}

TEST_F(LargePayload, ContainerHandsOutRealBodiesAndRejectsWhatCannotBeFetched) {
  const std::string url = make_queue("lp-container");
  const std::string bucket = make_bucket("container");
  const std::string java = pattern_body(1536 * 1024, 5), python = pattern_body(700 * 1024, 6),
                    legacy = pattern_body(300 * 1024, 7);
  test::run(io_, s3_->put_object(bucket, "java-key", java));
  test::run(io_, s3_->put_object(bucket, "python-key", python));
  test::run(io_, s3_->put_object(bucket, "legacy-key", legacy));
  // The Java client's exact text, the Python client's json.dumps spacing, the first
  // Java client's class and attribute.
  send_pointer(url, sqs::format_payload_pointer({bucket, "java-key"}), "ExtendedPayloadSize",
               java.size());
  send_pointer(url,
               R"(["software.amazon.payloadoffloading.PayloadS3Pointer", {"s3BucketName": ")" +
                   bucket + R"(", "s3Key": "python-key"}])",
               "ExtendedPayloadSize", python.size());
  send_pointer(url,
               R"(["com.amazon.sqs.javamessaging.MessageS3Pointer",{"s3BucketName":")" + bucket +
                   R"(","s3Key":"legacy-key"}])",
               "SQSLargePayloadSize", legacy.size());
  send_pointer(url, sqs::format_payload_pointer({bucket, "never-stored"}), "ExtendedPayloadSize",
               1000);
  send_pointer(url, R"({"not": "a pointer"})", "ExtendedPayloadSize", 10);
  send_pointer(url, sqs::format_payload_pointer({bucket, "java-key"}), "ExtendedPayloadSize",
               64 * 1024 * 1024);  // larger than the budget
  // An object larger than its attribute says: refused as it arrives, never held.
  test::run(io_, s3_->put_object(bucket, "liar-key", legacy));
  send_pointer(url, sqs::format_payload_pointer({bucket, "liar-key"}), "ExtendedPayloadSize", 10);
  // A pointer-looking body without the size attribute is an ordinary message.
  const std::string plain = sqs::format_payload_pointer({bucket, "java-key"});
  test::run(io_, client_->send_message(url, {"", plain, {}, {}, {}, {}, {}}));

  auto options = source_options(url);
  options.large_payloads = receiving(8 * 1024 * 1024);
  options.large_payloads.delete_after_ack = true;
  std::mutex mutex;
  std::multiset<std::string> bodies;
  std::multimap<std::string, std::string> unusable;  // reason -> detail
  ContainerOptions container_options;
  container_options.failure_backoff_base = 200ms;
  Container container(container_options, make_sqs_source(options), [&](Message& m) {
    std::lock_guard lock(mutex);
    bodies.insert(m.body());
  });
  container.set_unusable_handler(
      [&](Message& m, const std::string& reason, const std::string& detail) {
        {
          std::lock_guard lock(mutex);
          unusable.emplace(reason, detail);
        }
        m.reject(reason);
      });
  container.start();
  ASSERT_TRUE(test::wait_until(
      [&] {
        std::lock_guard lock(mutex);
        return bodies.size() == 4 && unusable.size() == 4;
      },
      30s))
      << bodies.size() << " handled, " << unusable.size() << " unusable";
  container.stop();
  EXPECT_EQ(bodies.count(java), 1u);
  EXPECT_EQ(bodies.count(python), 1u);
  EXPECT_EQ(bodies.count(legacy), 1u);
  EXPECT_EQ(bodies.count(plain), 1u);
  auto details = [&](const std::string& reason) {
    std::string all;
    for (auto [it, end] = unusable.equal_range(reason); it != end; ++it) all += it->second + "\n";
    return all;
  };
  EXPECT_NE(details("payload_missing").find("never-stored"), std::string::npos)
      << details("payload_missing");
  EXPECT_NE(details("payload_missing").find("NoSuchKey"), std::string::npos);
  EXPECT_EQ(unusable.count("malformed"), 2u);
  EXPECT_NE(details("malformed").find("not an S3 pointer"), std::string::npos);
  EXPECT_NE(details("malformed").find("liar-key is larger than its ExtendedPayloadSize"),
            std::string::npos)
      << details("malformed");
  EXPECT_NE(details("payload_too_large").find("max_bytes_in_flight"), std::string::npos);
  const auto stats = container.stats();
  EXPECT_EQ(stats.acked, 4u);
  EXPECT_EQ(stats.rejected, 4u);
  // delete_after_ack: the three resolved payloads' objects are gone once their
  // messages are; java-key went with the Java message even though others named it.
  for (const char* key : {"java-key", "python-key", "legacy-key"}) {
    try {
      get(bucket, key);
      ADD_FAILURE() << key << " was not deleted after its message";
    } catch (const aws::AwsError& e) {
      EXPECT_EQ(e.code(), "NoSuchKey") << key;
    }
  }
}

TEST_F(LargePayload, AFailingS3RetriesTheMessageUntilThePayloadComesBack) {
  const std::string url = make_queue("lp-retry");
  const std::string bucket = make_bucket("retry");
  const std::string payload = pattern_body(400 * 1024, 9);
  test::run(io_, s3_->put_object(bucket, "k", payload));
  send_pointer(url, sqs::format_payload_pointer({bucket, "k"}), "ExtendedPayloadSize",
               payload.size());
  // S3 behind a proxy that answers every request 503 until told otherwise.
  test::HttpFaults down;
  down.unavailable = 1.0;
  test::HttpFaultProxy proxy("127.0.0.1", Emulator::shared().port(), down);
  auto options = source_options(url);
  options.large_payloads = receiving(8 * 1024 * 1024);
  options.large_payloads.s3.endpoint_url = proxy.endpoint();
  ContainerOptions container_options;
  container_options.failure_backoff_base = 200ms;
  std::atomic<int> handled{0}, receive_count{0};
  std::atomic<bool> same{false};
  std::atomic<double> failures{0};
  struct Observer : ContainerObserver {
    std::atomic<double>* failures;
    void on_source_gauge(const std::string& name, double value) override {
      if (name == "large_payload_fetch_failures") *failures = value;
    }
  };
  auto observer = std::make_shared<Observer>();
  observer->failures = &failures;
  Container container(container_options, make_sqs_source(options), [&](Message& m) {
    same = m.body() == payload;
    receive_count = m.receive_count();
    ++handled;
  });
  container.set_observer(observer);
  container.start();
  // Two deliveries fail (each after the S3 client's own 3 attempts) before S3 is back.
  ASSERT_TRUE(test::wait_until([&] { return failures.load() >= 2; }, 30s));
  EXPECT_GE(proxy.faults_injected(), 6u);
  EXPECT_EQ(handled.load(), 0) << "never handed out with its pointer for a body";
  proxy.set_faults({});
  ASSERT_TRUE(test::wait_until([&] { return handled.load() == 1; }, 30s));
  container.stop();
  EXPECT_TRUE(same.load());
  EXPECT_GE(receive_count.load(), 3) << "delivered again after each failure";
  EXPECT_GE(container.stats().failed, 2u);
  EXPECT_EQ(container.stats().rejected, 0u);
  EXPECT_EQ(queue_total(url), 0);
}

TEST_F(LargePayload, BytesHeldStayWithinMaxBytesInFlight) {
  const std::string url = make_queue("lp-budget");
  const std::string bucket = make_bucket("budget");
  const std::size_t kPayload = 1024 * 1024;
  const std::uint64_t kBudget = 3 * kPayload + kPayload / 2;  // room for three at once
  const int kMessages = 24;
  for (int i = 0; i < kMessages; ++i) {
    const std::string key = "p" + std::to_string(i);
    test::run(io_, s3_->put_object(bucket, key, pattern_body(kPayload, static_cast<char>(i))));
    send_pointer(url, sqs::format_payload_pointer({bucket, key}), "ExtendedPayloadSize", kPayload);
  }
  struct Observer : ContainerObserver {
    std::atomic<double> peak_held{0}, waits{0}, fetched{0};
    void on_source_gauge(const std::string& name, double value) override {
      if (name == "large_payload_bytes_held" && value > peak_held) peak_held = value;
      if (name == "large_payload_waits") waits = value;
      if (name == "large_payloads_fetched") fetched = value;
    }
  };
  auto observer = std::make_shared<Observer>();
  auto options = source_options(url);
  options.large_payloads = receiving(kBudget);
  options.visibility_timeout = 4s;  // a payload that waits for room waits 2 s at most
  ContainerOptions container_options;
  container_options.max_in_flight = 30;
  container_options.max_concurrent_receives = 4;
  std::mutex mutex;
  std::map<std::string, int> handled;  // body prefix -> times
  std::atomic<std::size_t> in_handlers{0}, peak_in_handlers{0};
  Container container(container_options, make_sqs_source(options), [&](Message& m) {
    const std::size_t now = in_handlers += m.body().size();
    for (std::size_t seen = peak_in_handlers; now > seen;)
      if (peak_in_handlers.compare_exchange_weak(seen, now)) break;
    test::work_for(60ms);
    in_handlers -= m.body().size();
    std::lock_guard lock(mutex);
    ++handled[m.body().substr(0, 32)];
  });
  container.set_observer(observer);
  container.start();
  ASSERT_TRUE(test::wait_until(
      [&] {
        std::lock_guard lock(mutex);
        int total = 0;
        for (const auto& [_, n] : handled) total += n;
        return total >= kMessages;
      },
      60s));
  container.stop();
  EXPECT_EQ(handled.size(), static_cast<std::size_t>(kMessages)) << "every payload, once each";
  EXPECT_LE(observer->peak_held.load(), static_cast<double>(kBudget));
  EXPECT_LE(peak_in_handlers.load(), kBudget);
  // The bound bit: without it 24 payloads fit in max_in_flight 30 at once.
  EXPECT_GE(peak_in_handlers.load(), 2 * kPayload) << "payloads were handled side by side";
  EXPECT_GE(observer->fetched.load(), kMessages);
  EXPECT_GT(observer->waits.load(), 0) << "handlers waited for room";
  // Waiting costs no redelivery (a redelivery raises the receive count towards the
  // queue's redrive policy): each message was received once.
  EXPECT_EQ(container.stats().received, static_cast<std::uint64_t>(kMessages));
  EXPECT_EQ(queue_total(url), 0);
}

TEST_F(LargePayload, PipelineStoresEveryRecordOnceWithFivePercentThroughS3) {
  const std::string url = make_queue("lp-pipeline");
  const std::string dlq = make_queue("lp-pipeline-dlq");
  const std::string bucket = make_bucket("pipeline");
  // `sluice publish` as a user runs it: 5% of 600 events padded above 1 MiB, sent
  // through S3 by our publisher.
  const std::string publish = std::string(SLUICE_BINARY) + " publish --queue-url " + url +
                              " --endpoint-url " + Emulator::shared().endpoint() +
                              " --region us-east-1 --generate 600 --duplicates 0.2 --seed 11"
                              " --large-share 0.05 --large-bytes 1200000"
                              " --large-payload-bucket " +
                              bucket + " --s3-endpoint-url " + Emulator::shared().endpoint() +
                              " --s3-path-style 2>&1";
  const std::string out =
      test::run_command("AWS_ACCESS_KEY_ID=AKIDLOCAL AWS_SECRET_ACCESS_KEY=x " + publish);
  EXPECT_NE(out.find("600/600 sent, 0 failed"), std::string::npos) << out;
  auto events = app::generate_events(600, 0.2, 0.0, 11);
  const std::size_t padded = app::pad_events(events.bodies, 0.05, 1200000, 11);
  EXPECT_GE(padded, 15u);
  // Pointers written by hand in the Java client's format, to new records, and one to
  // an object that is not there.
  std::size_t extra = 0;
  for (int i = 0; i < 5; ++i) {
    nlohmann::json doc = {{"skuId", "SKU-JAVA-" + std::to_string(i)},
                          {"locationId", "L-1"},
                          {"eventType", "RESTOCK"},
                          {"quantity", i},
                          {"padding", std::string(1300 * 1024, 'j')}};
    const std::string key = "java/" + std::to_string(i);
    const std::string payload = doc.dump();
    test::run(io_, s3_->put_object(bucket, key, payload));
    send_pointer(url, sqs::format_payload_pointer({bucket, key}), "ExtendedPayloadSize",
                 payload.size());
    ++extra;
  }
  send_pointer(url, sqs::format_payload_pointer({bucket, "java/missing"}), "ExtendedPayloadSize",
               2000000);

  const std::string db = ::testing::TempDir() + "/sluice-lp-" + std::to_string(getpid()) + ".db";
  test::remove_sqlite(db);
  const auto config = app::parse_config(
      "source:\n  concurrency: 2-4\n  max_in_flight: 100\n  sqs:\n    queue_url: " + url +
      "\n    endpoint_url: " + Emulator::shared().endpoint() +
      "\n    region: us-east-1\n    poll_wait: 1s\n"
      "    delete_flush_interval: 20ms\n    large_payloads:\n      enabled: true\n"
      "      max_bytes_in_flight: 8388608\n      addressing: path\n      endpoint_url: " +
      Emulator::shared().endpoint() + "\n    dead_letter_queue_url: " + dlq +
      "\ndecode:\n  max_body_bytes: 2097152\n" + test::inventory_stages_yaml() +
      "metrics:\n  listen: 127.0.0.1:0\nlogging:\n  level: warn\nsink:\n  type: sqlite\n  "
      "sqlite:\n    path: " +
      db + "\n");
  const auto summary = run_until_drained(config);
  EXPECT_EQ(summary.received, 600u + extra + 1);
  EXPECT_EQ(summary.records_in_sink, events.distinct_records + extra);
  EXPECT_EQ(summary.written, events.distinct_records + extra);
  EXPECT_EQ(summary.rejected_by_source.at("payload_missing"), 1u);
  ASSERT_FALSE(summary.source_figures.empty());
  EXPECT_EQ(summary.source_figures[0].first, "S3 payloads fetched");
  EXPECT_EQ(summary.source_figures[0].second, padded + extra)
      << "each padded event came through S3";
  EXPECT_EQ(queue_total(url), 0) << "every message settled: written, duplicate or dead-lettered";
  const auto reasons = sqlite_column(db, "SELECT reason || ' ' || detail FROM rejects");
  ASSERT_EQ(reasons.size(), 1u);
  EXPECT_NE(reasons[0].find("payload_missing"), std::string::npos) << reasons[0];
  EXPECT_NE(reasons[0].find("java/missing"), std::string::npos) << reasons[0];
  // The padded events' documents are whole: their skuId came out of the S3 body.
  EXPECT_EQ(
      sqlite_column(db, "SELECT count(*) FROM records WHERE document LIKE '%SKU-JAVA-%'").at(0),
      "5");
  // The dead letter is the pointer it came as, with its reason.
  sqs::ReceiveMessageRequest r;
  r.queue_url = dlq;
  r.wait_time_seconds = 2;
  const auto dead = test::run(io_, client_->receive_message(r));
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0].body, sqs::format_payload_pointer({bucket, "java/missing"}));
  EXPECT_EQ(dead[0]
                .message_attributes.at("sluice-reject-reason")
                .string_value.rfind("payload_missing", 0),
            0u);
  test::remove_sqlite(db);
}

TEST_F(LargePayload, SnsTopicFansOutToTwoQueuesDrainedByTwoPipelines) {
  sns::SnsClientOptions sns_options;
  sns_options.endpoint_url = Emulator::shared().endpoint();
  sns_options.region = "us-east-1";
  sns_options.credentials = test::emulator_client_options().credentials;
  sns_options.http.use_env_proxy = false;
  sns::SnsClient sns(io_.get_executor(), sns_options);
  const std::string topic =
      test::run(io_, sns.create_topic("fanout-" + std::to_string(getpid()), {}));
  const std::string enveloped = make_queue("fan-envelope"), raw = make_queue("fan-raw");
  auto arn_of = [&](const std::string& url) {
    return test::run(io_, client_->get_queue_attributes(url)).at("QueueArn");
  };
  test::run(io_, sns.subscribe(topic, "sqs", arn_of(enveloped), {}));
  test::run(io_, sns.subscribe(topic, "sqs", arn_of(raw), {{"RawMessageDelivery", "true"}}));

  // `sluice publish --topic-arn`: 300 events in PublishBatch calls, 20 more one by one.
  auto publish = [&](const std::string& flags) {
    const std::string cmd = "AWS_ACCESS_KEY_ID=AKIDLOCAL AWS_SECRET_ACCESS_KEY=x " +
                            std::string(SLUICE_BINARY) + " publish --topic-arn " + topic +
                            " --endpoint-url " + Emulator::shared().endpoint() +
                            " --region us-east-1 " + flags + " 2>&1";
    return test::run_command(cmd);
  };
  const std::string batch_out = publish("--generate 300 --duplicates 0.3 --seed 5");
  EXPECT_NE(batch_out.find("300/300 sent, 0 failed"), std::string::npos) << batch_out;
  const std::string single_out = publish("--generate 20 --duplicates 0 --seed 6 --single");
  EXPECT_NE(single_out.find("20/20 sent, 0 failed"), std::string::npos) << single_out;
  const auto batch_events = app::generate_events(300, 0.3, 0.0, 5);
  const auto single_events = app::generate_events(20, 0.0, 0.0, 6);
  // The business records of both runs together, as the generator counts them.
  std::set<std::string> records;
  for (const auto* events : {&batch_events, &single_events})
    for (const auto& body : events->bodies) {
      const auto doc = nlohmann::json::parse(body);
      const auto& q = doc["quantity"];
      records.insert(doc["skuId"].dump() + doc["locationId"].dump() + doc["eventType"].dump() +
                     (q.is_string() ? q.get<std::string>() : q.dump()));
    }
  const std::size_t distinct = records.size();
  auto drain = [&](const std::string& url, bool envelope, const std::string& db) {
    test::remove_sqlite(db);
    std::string stages = test::inventory_stages_yaml();
    if (envelope) {
      const std::string marker = "    - {name: eventId, from: /eventId}\n";
      stages.insert(stages.find(marker) + marker.size(),
                    "    - {name: topicArn, meta: sns_topic_arn}\n"
                    "    - {name: snsMessageId, meta: sns_message_id}\n"
                    "    - {name: publishedAt, meta: sns_timestamp}\n"
                    "    - {name: signatureVersion, meta: sns_signature_version}\n");
    }
    const auto config = app::parse_config(
        "source:\n  sqs:\n    queue_url: " + url +
        "\n    endpoint_url: " + Emulator::shared().endpoint() +
        "\n    region: us-east-1\n    poll_wait: 1s\n    delete_flush_interval: 20ms\ndecode:\n"
        "  sns_envelope: " +
        (envelope ? "true" : "false") + "\n" + stages +
        "metrics:\n  listen: 127.0.0.1:0\nlogging:\n  level: warn\nsink:\n  type: sqlite\n  "
        "sqlite:\n    path: " +
        db + "\n");
    return run_until_drained(config);
  };
  const std::string db1 = ::testing::TempDir() + "/sluice-fan1-" + std::to_string(getpid()) + ".db";
  const std::string db2 = ::testing::TempDir() + "/sluice-fan2-" + std::to_string(getpid()) + ".db";
  const auto first = drain(enveloped, true, db1);
  const auto second = drain(raw, false, db2);
  EXPECT_EQ(first.received, 320u);
  EXPECT_EQ(second.received, 320u);
  EXPECT_EQ(first.records_in_sink, distinct);
  EXPECT_EQ(second.records_in_sink, distinct);
  EXPECT_EQ(first.rejected_malformed, 0u) << "every envelope unwrapped";
  // The envelope's fields, kept with each document.
  const auto topics =
      sqlite_column(db1, "SELECT DISTINCT json_extract(document, '$.topicArn') FROM records");
  ASSERT_EQ(topics.size(), 1u);
  EXPECT_EQ(topics[0], topic);
  EXPECT_EQ(sqlite_column(db1,
                          "SELECT count(*) FROM records WHERE "
                          "json_extract(document, '$.snsMessageId') IS NULL OR "
                          "json_extract(document, '$.publishedAt') NOT LIKE '20%T%Z'")
                .at(0),
            "0");
  // Raw delivery: the bodies are the events themselves, no envelope.
  EXPECT_EQ(
      sqlite_column(db2, "SELECT count(*) FROM records WHERE document LIKE '%TopicArn%'").at(0),
      "0");
  for (const auto& path : {db1, db2}) test::remove_sqlite(path);
}
