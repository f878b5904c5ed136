#include "config/config.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "amqp/driver.hpp"
#include "file/driver.hpp"
#include "sinks/postgres/driver.hpp"
#include "sinks/sqlite/driver.hpp"
#include "sqs/driver.hpp"

using namespace sluice::app;

namespace {
const char* kMinimal = R"(
source:
  sqs:
    queue_url: http://127.0.0.1:1/000000000000/q
normalize:
  fields:
    - {name: skuId, from: /skuId, required: true}
    - {name: quantity, from: /quantity, type: integer}
identity:
  versions:
    V1: [skuId, quantity]
)";

std::string error_of(const std::string& yaml) {
  try {
    parse_config(yaml, "test.yaml");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no error";
}

std::string with(const std::string& extra) {
  return std::string(kMinimal) + extra;
}

// The message holds every part.
::testing::AssertionResult has(const std::string& message,
                               std::initializer_list<const char*> parts) {
  for (const char* p : parts)
    if (message.find(p) == std::string::npos)
      return ::testing::AssertionFailure() << message << " lacks " << p;
  return ::testing::AssertionSuccess();
}

const sluice::SqsSourceOptions& sqs(const PipelineConfig& c) {
  return c.source_as<sluice::sqs::SqsSettings>().source;
}
const sluice::AmqpSourceOptions& amqp(const PipelineConfig& c) {
  return c.source_as<sluice::amqp::AmqpSettings>().source;
}
}  // namespace

TEST(Config, DefaultsComeFromTheOptionTable) {
  const auto c = parse_config(kMinimal);
  EXPECT_EQ(c.container.max_in_flight, 100);
  EXPECT_EQ(sqs(c).poll_wait, std::chrono::seconds(20));
  EXPECT_EQ(c.sink_type, "sqlite");
  EXPECT_EQ(c.sink_as<sluice::sinks::SqliteSettings>().options.path, "sluice.db");
  EXPECT_EQ(c.writer.batch_size, 100u);
  EXPECT_EQ(c.transform.hash_version, "V1");
  EXPECT_EQ(c.metrics_listen, "127.0.0.1:9464");
  EXPECT_EQ(c.container.ack_mode, sluice::AckMode::manual);
}

TEST(Config, ReadsEveryKindOfValue) {
  const auto c = parse_config(with(R"(
  version: V1
sink:
  type: postgres
  batch_size: 250
  batch_timeout: 5ms
  postgres:
    dsn: host=127.0.0.1
    columns: [skuId]
decode:
  sns_envelope: yes
)"));
  EXPECT_EQ(c.sink_type, "postgres");
  EXPECT_EQ(c.writer.batch_size, 250u);
  EXPECT_EQ(c.writer.batch_timeout, std::chrono::milliseconds(5));
  EXPECT_TRUE(c.transform.unwrap_sns);
  const auto& postgres = c.sink_as<sluice::sinks::PostgresSettings>().options;
  ASSERT_EQ(postgres.columns.size(), 1u);
  EXPECT_EQ(postgres.columns[0].field, "skuId");
  EXPECT_EQ(postgres.table, "records") << "sink.table, taken over by the driver";
}

TEST(Config, ErrorsNameTheKeyTheValueAndWhatWasExpected) {
  EXPECT_TRUE(has(error_of(with("sink:\n  batch_size: lots\n")),
                  {"test.yaml", "sink.batch_size", "'lots'", "integer from 1 to 1000"}));
  EXPECT_TRUE(has(error_of(std::string(kMinimal) + "sink:\n  type: oracle\n"),
                  {"sink.type", "'oracle'", "sqlite, postgres, mongodb"}));
  EXPECT_TRUE(has(error_of(with("sink:\n  batch_timeout: 5\n")),
                  {"sink.batch_timeout", "'5'", "duration"}));
  EXPECT_TRUE(has(error_of(with("sink:\n  sqllite:\n    path: x\n")),
                  {"unknown key sink.sqllite", "did you mean"}));
  EXPECT_TRUE(has(error_of(with("metrics:\n  lisen: x\n")),
                  {"unknown key metrics.lisen", "metrics.listen"}));
  EXPECT_TRUE(has(error_of(with("sink:\n  type: postgres\n")), {"sink.postgres.dsn", "missing"}));
  EXPECT_TRUE(has(error_of(with("logging:\n  fields: [nope]\n")), {"logging.fields", "nope"}));
  EXPECT_TRUE(has(error_of("source:\n  sqs:\n    queue_url: http://127.0.0.1:1/000000000000/q\n"),
                  {"normalize.fields"}));
  EXPECT_TRUE(has(error_of("normalize: {}\n"), {"source.sqs.queue_url", "missing"}));
  EXPECT_TRUE(has(error_of(std::string(kMinimal) +
                           "normalize:\n  fields:\n    - {name: a, from: /a, typo: 1}\n"),
                  {"normalize.fields[0].typo"}));
  EXPECT_TRUE(
      has(error_of(with("source:\n  concurrency: 4-2\n")), {"source.concurrency", "'4-2'"}));
  EXPECT_TRUE(has(error_of("a: [1, 2"), {"not valid YAML"}));
}

TEST(Config, EnvironmentOverridesTheFile) {
  setenv("SLUICE_QUEUE_URL", "http://127.0.0.1:2/000000000000/from-env", 1);
  setenv("SLUICE_POSTGRES_DSN", "host=127.0.0.1 password=s3cret", 1);
  const auto c = parse_config(with("sink:\n  type: postgres\n"));
  unsetenv("SLUICE_QUEUE_URL");
  unsetenv("SLUICE_POSTGRES_DSN");
  EXPECT_EQ(sqs(c).queue_url, "http://127.0.0.1:2/000000000000/from-env");
  EXPECT_EQ(c.sink_as<sluice::sinks::PostgresSettings>().options.dsn,
            "host=127.0.0.1 password=s3cret");
  EXPECT_EQ(describe(c).find("s3cret"), std::string::npos) << "secrets are redacted";
  setenv("SLUICE_LOG_LEVEL", "loud", 1);
  const std::string error = error_of(kMinimal);
  unsetenv("SLUICE_LOG_LEVEL");
  EXPECT_NE(error.find("SLUICE_LOG_LEVEL"), std::string::npos) << error;
}

TEST(Config, TheExampleConfigurationLoads) {
  const auto c = load_config(std::string(SLUICE_SOURCE_DIR) + "/examples/inventory-pipeline.yaml");
  EXPECT_EQ(c.transform.hash_versions.at("V1").size(), 4u);
  EXPECT_EQ(c.container.max_in_flight, 400);
}

TEST(Config, TheSnsAndLargePayloadExamplesLoad) {
  const auto large =
      load_config(std::string(SLUICE_SOURCE_DIR) + "/examples/large-payloads-pipeline.yaml");
  EXPECT_TRUE(sqs(large).large_payloads.enabled);
  EXPECT_EQ(sqs(large).large_payloads.max_bytes_in_flight, 268435456u);
  EXPECT_EQ(sqs(large).large_payloads.s3.addressing, sluice::s3::AddressingStyle::auto_detect);
  EXPECT_EQ(large.transform.max_body_bytes, 16777216u);
  const auto sns = load_config(std::string(SLUICE_SOURCE_DIR) + "/examples/sns-pipeline.yaml");
  EXPECT_TRUE(sns.transform.unwrap_sns);
  EXPECT_FALSE(sqs(sns).large_payloads.enabled);
}

TEST(Config, LargePayloadAndSnsOptionsAreChecked) {
  const std::string base = "source:\n  sqs:\n    queue_url: http://127.0.0.1:1/0/q\n";
  const std::string stages =
      "normalize:\n  fields:\n    - {name: a, from: /a}\n    - {name: t, meta: sns_topic_arn}\n"
      "identity:\n  versions:\n    V1: [a]\n";
  auto error = [&](const std::string& yaml) {
    try {
      parse_config(yaml);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error(base + "    large_payloads:\n      max_bytes_in_flight: 0\n" + stages +
                  "decode:\n  sns_envelope: true\n")
                .find("source.sqs.large_payloads.max_bytes_in_flight"),
            std::string::npos);
  EXPECT_NE(error(base + "    large_payloads:\n      addressing: dns\n" + stages +
                  "decode:\n  sns_envelope: true\n")
                .find("source.sqs.large_payloads.addressing"),
            std::string::npos);
  const std::string no_envelope = error(base + stages);
  EXPECT_NE(no_envelope.find("decode.sns_envelope"), std::string::npos) << no_envelope;
  EXPECT_EQ(error(base + stages + "decode:\n  sns_envelope: true\n"), "");
}

TEST(Config, LargePayloadsRaiseTheBodyLimitUnlessItIsSet) {
  const std::string base =
      "source:\n  sqs:\n    queue_url: http://127.0.0.1:1/0/q\n    large_payloads:\n      enabled: "
      "true\n"
      "      max_bytes_in_flight: 50000000\nnormalize:\n  fields:\n    - {name: a, from: /a}\n"
      "identity:\n  versions:\n    V1: [a]\n";
  EXPECT_EQ(parse_config(base).transform.max_body_bytes, 50000000u);
  EXPECT_EQ(parse_config(base + "decode:\n  max_body_bytes: 1000\n").transform.max_body_bytes,
            1000u);
}

TEST(Config, DocumentationMatchesTheOptionTable) {
  std::ifstream in(std::string(SLUICE_SOURCE_DIR) + "/docs/configuration.md");
  std::stringstream committed;
  committed << in.rdbuf();
  EXPECT_EQ(committed.str(), configuration_markdown())
      << "docs/configuration.md is stale: run `sluice config docs > docs/configuration.md`";
}

// Issue 9, finding 6: what the configuration used to accept and must refuse.
TEST(Config, RefusesWhatItUsedToAcceptSilently) {
  // A duration whose milliseconds overflow 64 bits used to wrap to a small value.
  EXPECT_TRUE(has(error_of(with("source:\n  shutdown_deadline: 9223372036854775807h\n")),
                  {"source.shutdown_deadline", "9223372036854775807h", "duration"}));
  EXPECT_TRUE(has(error_of(with("source:\n  failure_backoff: 5000000000000000h\n")),
                  {"source.failure_backoff"}));
  // SQS takes whole seconds: 500ms used to become 0 (short polling).
  EXPECT_TRUE(has(error_of(with("source:\n  sqs:\n    poll_wait: 500ms\n")),
                  {"source.sqs.poll_wait", "'500ms'", "whole seconds"}));
  EXPECT_TRUE(has(error_of(with("source:\n  sqs:\n    visibility_timeout: 1500ms\n")),
                  {"source.sqs.visibility_timeout", "whole seconds"}));
  EXPECT_EQ(sqs(parse_config(with("source:\n  sqs:\n    poll_wait: 2000ms\n"))).poll_wait,
            std::chrono::seconds(2));
  // Port 70000 used to bind port 4464.
  EXPECT_TRUE(has(error_of(with("metrics:\n  listen: 127.0.0.1:70000\n")),
                  {"metrics.listen", "70000", "1 to 65535", "SLUICE_METRICS_LISTEN"}));
  EXPECT_TRUE(has(error_of(with("metrics:\n  listen: localhost:9464\n")),
                  {"metrics.listen", "IP address"}));
  // A queue URL that is not one, named with its key and environment variable.
  EXPECT_TRUE(has(error_of(with("source:\n  sqs:\n    queue_url: not-a-url\n")),
                  {"source.sqs.queue_url", "'not-a-url'", "SQS queue URL", "SLUICE_QUEUE_URL"}));
  EXPECT_TRUE(
      has(error_of(with("source:\n  sqs:\n    queue_url: https://sqs.us-east-1.amazonaws.com/\n")),
          {"source.sqs.queue_url", "/ACCOUNT/QUEUE_NAME"}));
  EXPECT_TRUE(has(error_of(with("source:\n  sqs:\n    endpoint_url: 127.0.0.1:4566\n")),
                  {"source.sqs.endpoint_url", "http://", "SLUICE_SQS_ENDPOINT"}));
  EXPECT_TRUE(has(error_of(with("source:\n  sqs:\n    dead_letter_queue_url: ftp://x/1/q\n")),
                  {"source.sqs.dead_letter_queue_url", "SLUICE_DEAD_LETTER_QUEUE_URL"}));
  setenv("SLUICE_SQS_ENDPOINT", "nonsense", 1);
  const std::string from_env = error_of(kMinimal);
  unsetenv("SLUICE_SQS_ENDPOINT");
  EXPECT_TRUE(has(from_env, {"source.sqs.endpoint_url", "SLUICE_SQS_ENDPOINT", "'nonsense'"}));
  // Cross-field errors name the YAML keys, not the library's option names.
  EXPECT_TRUE(has(error_of(with("source:\n  failure_backoff: 10s\n  failure_backoff_max: 1s\n")),
                  {"source.failure_backoff_max", "at least source.failure_backoff"}));
  EXPECT_TRUE(has(
      error_of(with("source:\n  heartbeat_interval: 6s\n  sqs:\n    visibility_timeout: 10s\n")),
      {"source.heartbeat_interval", "half of source.sqs.visibility_timeout"}));
  // Unacknowledged MongoDB writes.
  EXPECT_TRUE(has(error_of(with("sink:\n  mongodb:\n    write_concern: \"0\"\n")),
                  {"sink.mongodb.write_concern", "majority", "from 1", "unacknowledged"}));
  EXPECT_TRUE(
      has(error_of(with("metrics:\n  listen: ::1:9464\n")), {"metrics.listen", "brackets"}));
  EXPECT_TRUE(has(
      error_of(with("source:\n  sqs:\n    queue_url: https://sqs.us-east-1.amazonaws.com//q\n")),
      {"source.sqs.queue_url", "/ACCOUNT/QUEUE_NAME"}));
  const std::string with_credentials =
      error_of(with("source:\n  sqs:\n    queue_url: https://u:hunter2@sqs.example.com/1/q\n"));
  EXPECT_TRUE(has(with_credentials, {"source.sqs.queue_url", "without credentials"}));
  EXPECT_EQ(with_credentials.find("hunter2"), std::string::npos) << with_credentials;
}

TEST(Config, NeverEchoesASecret) {
  // A secret given with the wrong type: the error names the key, not the value.
  const std::string file_error =
      error_of(with("sink:\n  postgres:\n    dsn: {password: hunter2-secret}\n"));
  EXPECT_NE(file_error.find("sink.postgres.dsn"), std::string::npos) << file_error;
  EXPECT_EQ(file_error.find("hunter2"), std::string::npos) << file_error;
  const std::string uri_error =
      error_of(with("sink:\n  mongodb:\n    uri: [mongodb://u:hunter2-secret@h/]\n"));
  EXPECT_NE(uri_error.find("sink.mongodb.uri"), std::string::npos) << uri_error;
  EXPECT_EQ(uri_error.find("hunter2"), std::string::npos) << uri_error;
}

TEST(Config, ADirectoryIsNotAConfigurationFile) {
  try {
    load_config(::testing::TempDir());
    FAIL() << "a directory loaded";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("is a directory"), std::string::npos) << e.what();
  }
}

// SQS receives default to auto (the measured better setting, BENCHMARKS.md); the other
// sources keep Spring's 1-4 consumers; a setting given is kept.
TEST(Config, ConcurrencyDefaultsToAutoForSqsOnly) {
  const auto sqs = parse_config(kMinimal);
  EXPECT_TRUE(sqs.container.auto_concurrency);
  EXPECT_EQ(sqs.container.min_concurrent_receives, 1);
  // Auto's real bound, as /metrics reports it: max_in_flight 100 fills 10 receives.
  EXPECT_EQ(sqs.container.max_concurrent_receives, 10);
  EXPECT_NE(describe(sqs).find("receives auto, at most 10"), std::string::npos) << describe(sqs);
  // The minimal configuration with one more key in its source section.
  auto with_source_key = [](const std::string& line) {
    std::string yaml = kMinimal;
    return parse_config(yaml.replace(yaml.find("normalize:"), 0, "  " + line + "\n"));
  };
  const auto fixed = with_source_key("concurrency: 2-6");
  EXPECT_FALSE(fixed.container.auto_concurrency);
  EXPECT_EQ(fixed.container.min_concurrent_receives, 2);
  EXPECT_EQ(fixed.container.max_concurrent_receives, 6);
  // A tuned trigger of the MIN-MAX scaler keeps the range: auto would ignore it.
  const auto tuned = with_source_key("consecutive_full_trigger: 1");
  EXPECT_FALSE(tuned.container.auto_concurrency);
  EXPECT_EQ(tuned.container.max_concurrent_receives, 4);
  EXPECT_EQ(tuned.container.consecutive_full_trigger, 1);
  const auto rabbit = parse_config(
      "source:\n  type: rabbitmq\n  rabbitmq:\n    queue: q\nnormalize:\n  fields:\n    - "
      "{name: skuId, from: /skuId, required: true}\nidentity:\n  versions:\n    V1: [skuId]\n");
  EXPECT_FALSE(rabbit.container.auto_concurrency);
  EXPECT_EQ(amqp(rabbit).min_consumers, 1);
  EXPECT_EQ(amqp(rabbit).max_consumers, 4);
}

TEST(Config, ConcurrencyAutoAndTheAutoscaleOptions) {
  const std::string fields = R"(normalize:
  fields:
    - {name: skuId, from: /skuId, required: true}
identity:
  versions:
    V1: [skuId]
)";
  auto sqs = parse_config(
      "source:\n  sqs:\n    queue_url: http://127.0.0.1:1/000000000000/q\n"
      "  concurrency: auto\n  max_in_flight: 500\n" +
      fields +
      "autoscale:\n  period: 30s\n  periods: 3\n  spare: 2\n"
      "  capacity: 50\n  running_tasks: 4\n");
  EXPECT_TRUE(sqs.container.auto_concurrency);
  EXPECT_EQ(sqs.container.min_concurrent_receives, 1);
  EXPECT_NE(describe(sqs).find("receives auto, at most 50"), std::string::npos) << describe(sqs);
  EXPECT_EQ(sqs.autoscale.period, std::chrono::seconds(30));
  EXPECT_EQ(sqs.autoscale.periods, 3);
  EXPECT_EQ(sqs.autoscale.spare, 2);
  EXPECT_EQ(sqs.autoscale_capacity, 50);
  EXPECT_EQ(sqs.autoscale_running, 4);
  // RabbitMQ: consumers elastic from 1 to max_in_flight / prefetch.
  auto rabbit = parse_config(
      "source:\n  type: rabbitmq\n  rabbitmq:\n    queue: q\n    prefetch: 100\n  concurrency: "
      "auto\n"
      "  max_in_flight: 1000\n" +
      fields);
  EXPECT_EQ(amqp(rabbit).min_consumers, 1);
  EXPECT_EQ(amqp(rabbit).max_consumers, 10);
  EXPECT_TRUE(has(error_of(with("autoscale:\n  periods: 0\n")), {"autoscale.periods", "'0'"}));
  EXPECT_TRUE(has(error_of(with("autoscale:\n  period: 500ms\n")), {"autoscale.period", "500ms"}));
  EXPECT_TRUE(has(error_of(with("source:\n  concurrency: automatic\n")),
                  {"source.concurrency", "or auto"}));
}

// Each source has its section; a key of another source is refused, not ignored.
TEST(Config, EachSourceHasItsOwnSection) {
  const std::string fields =
      "normalize:\n  fields:\n    - {name: a, from: /a}\nidentity:\n  versions:\n    V1: [a]\n";
  const auto rabbit = parse_config(
      "source:\n  type: rabbitmq\n  rabbitmq:\n    queue: orders\n"
      "    url: amqp://u:p@127.0.0.1:5999/%2f\n" +
      fields);
  EXPECT_EQ(rabbit.source_driver->name(), "rabbitmq");
  EXPECT_EQ(amqp(rabbit).queue, "orders");
  EXPECT_EQ(amqp(rabbit).uri, "amqp://u:p@127.0.0.1:5999/%2f");
  EXPECT_TRUE(rabbit.warnings.empty());
  // An SQS key with RabbitMQ chosen (the dead-letter queue of the old flat namespace too).
  EXPECT_TRUE(has(error_of("source:\n  type: rabbitmq\n  rabbitmq:\n    queue: q\n  sqs:\n"
                           "    queue_url: http://127.0.0.1:1/0/q\n" +
                           fields),
                  {"source.sqs.queue_url", "set, but source.type is rabbitmq", "refused"}));
  EXPECT_TRUE(has(error_of("source:\n  type: rabbitmq\n  rabbitmq:\n    queue: q\n"
                           "dead_letter:\n  queue_url: http://127.0.0.1:1/0/dlq\n" +
                           fields),
                  {"dead_letter.queue_url", "source.type is rabbitmq"}));
  EXPECT_TRUE(has(error_of("source:\n  rabbitmq:\n    queue: q\n" + fields),
                  {"source.rabbitmq.queue", "source.type is sqs"}));
  // A variable of another source in the environment is not this one's business.
  setenv("SLUICE_AMQP_QUEUE", "elsewhere", 1);
  const std::string ok = error_of(kMinimal);
  unsetenv("SLUICE_AMQP_QUEUE");
  EXPECT_EQ(ok, "no error");
  // The type names the registered sources.
  EXPECT_TRUE(has(error_of(with("source:\n  type: kafka\n")),
                  {"source.type", "'kafka'", "sqs, rabbitmq, file"}));
  // A message property the chosen source does not have.
  EXPECT_TRUE(has(error_of("source:\n  type: rabbitmq\n  rabbitmq:\n    queue: q\n"
                           "normalize:\n  fields:\n    - {name: a, from: /a}\n"
                           "    - {name: s, meta: sequence_number}\n"
                           "identity:\n  versions:\n    V1: [a]\n"),
                  {"normalize.fields[1].meta", "'sequence_number'", "rabbitmq", "sent_time"}));
}

TEST(Config, KeysOfEarlierReleasesAreReadWithAWarningNamingTheNewKey) {
  const auto c = parse_config(
      "source:\n  queue_url: http://127.0.0.1:1/0/q\n  poll_wait: 5s\n  large_payloads:\n"
      "    enabled: true\ndead_letter:\n  queue_url: http://127.0.0.1:1/0/dlq\n"
      "normalize:\n  fields:\n    - {name: a, from: /a}\nidentity:\n  versions:\n    V1: [a]\n");
  EXPECT_EQ(sqs(c).queue_url, "http://127.0.0.1:1/0/q");
  EXPECT_EQ(sqs(c).poll_wait, std::chrono::seconds(5));
  EXPECT_TRUE(sqs(c).large_payloads.enabled);
  EXPECT_EQ(sqs(c).dead_letter_queue_url, "http://127.0.0.1:1/0/dlq");
  ASSERT_EQ(c.warnings.size(), 4u);
  EXPECT_EQ(c.warnings[0],
            "source.queue_url is now source.sqs.queue_url (read under its new name; the old "
            "name will be refused in the next release)");
  EXPECT_NE(c.warnings[3].find("dead_letter.queue_url is now source.sqs.dead_letter_queue_url"),
            std::string::npos);
  // Its errors name both.
  const std::string e = error_of(with("source:\n  poll_wait: 500ms\n"));
  EXPECT_NE(e.find("source.sqs.poll_wait (written source.poll_wait)"), std::string::npos) << e;
  const auto rabbit = parse_config(
      "source:\n  type: rabbitmq\n  queue: q\n  amqp_heartbeat: 10s\n  prefetch: 7\n"
      "normalize:\n  fields:\n    - {name: a, from: /a}\nidentity:\n  versions:\n    V1: [a]\n");
  EXPECT_EQ(amqp(rabbit).heartbeat, std::chrono::seconds(10));
  EXPECT_EQ(amqp(rabbit).prefetch, 7);
}

TEST(Config, TheFileSource) {
  const std::string fields =
      "normalize:\n  fields:\n    - {name: a, from: /a}\nidentity:\n  versions:\n    V1: [a]\n";
  const auto c = parse_config("source:\n  type: file\n  file:\n    path: events.jsonl\n" + fields);
  const auto& file = c.source_as<sluice::file::FileSettings>().source;
  EXPECT_EQ(file.path, "events.jsonl");
  EXPECT_EQ(sluice::file::checkpoint_path(file), "events.jsonl.checkpoint");
  EXPECT_FALSE(c.writer.dead_letter_queue) << "rejects stay in the rejects table";
  EXPECT_NE(describe(c).find("checkpoint events.jsonl.checkpoint"), std::string::npos)
      << describe(c);
  EXPECT_TRUE(has(error_of("source:\n  type: file\n" + fields), {"source.file.path", "missing"}));
  EXPECT_TRUE(has(error_of("source:\n  type: file\n  file:\n    path: 'logs/*.jsonl'\n" + fields),
                  {"source.file.checkpoint", "glob"}));
  EXPECT_TRUE(has(error_of("source:\n  type: file\n  file:\n    path: '-'\n"
                           "    checkpoint: x.ckpt\n" +
                           fields),
                  {"source.file.checkpoint", "standard input"}));
  EXPECT_TRUE(
      has(error_of("source:\n  type: file\n  file:\n    path: a\n    max_batch: 0\n" + fields),
          {"source.file.max_batch", "'0'"}));
}

TEST(Config, TheFileExampleLoads) {
  const auto c = load_config(std::string(SLUICE_SOURCE_DIR) + "/examples/file-backfill.yaml");
  EXPECT_EQ(c.source_driver->name(), "file");
  EXPECT_EQ(c.source_as<sluice::file::FileSettings>().source.checkpoint, "backfill/.checkpoint");
  EXPECT_TRUE(c.warnings.empty());
  for (const char* example : {"inventory-pipeline.yaml", "rabbitmq-pipeline.yaml",
                              "sns-pipeline.yaml", "large-payloads-pipeline.yaml"})
    EXPECT_TRUE(load_config(std::filesystem::path(SLUICE_SOURCE_DIR) / "examples" / example)
                    .warnings.empty())
        << example << " uses a key of an earlier release";
}

TEST(Config, AnOldKeyBesideItsNewNameIsRefused) {
  const std::string e = error_of(with("source:\n  queue_url: http://127.0.0.1:1/0/other\n"));
  EXPECT_NE(e.find("source.sqs.queue_url: given twice, also as source.queue_url"),
            std::string::npos)
      << e;
}

// Normalization keys: each mistake refused at load, with the key and the reason.
TEST(Config, NormalizationMistakesAreRefusedWithTheKeyAndTheReason) {
  const std::string sqs = "source:\n  sqs:\n    queue_url: http://127.0.0.1:1/000000000000/q\n";
  auto fields = [&](const std::string& list, const std::string& identity = "[a]") {
    return error_of(sqs + "normalize:\n  fields:\n" + list +
                    "identity:\n  versions:\n    V1: " + identity + "\n");
  };
  EXPECT_TRUE(has(fields("    - {name: a, from: /a, type: money}\n"),
                  {"normalize.fields[0].type", "'money'", "timestamp", "decimal", "uuid", "enum"}));
  EXPECT_TRUE(has(fields("    - {name: a, from: /a, pattern: \"([a-z\"}\n"),
                  {"normalize.fields[a].pattern = ([a-z", "does not compile", "missing ]"}));
  EXPECT_TRUE(has(fields("    - {name: a, from: /a, type: enum, values: [X, Y], default: Z}\n"),
                  {"normalize.fields[a].default", "\"Z\"", "expected one of X, Y"}));
  EXPECT_TRUE(
      has(fields("    - {name: a, from: /a, text: [trim, shout]}\n"),
          {"normalize.fields[0].text[]", "'shout'", "one of trim, lower, upper, nfc, collapse"}));
  EXPECT_TRUE(has(fields("    - {name: a, from: /a, text: [lower, upper]}\n"),
                  {"normalize.fields[0].text", "at most one of lower and upper"}));
  EXPECT_TRUE(has(fields("    - {name: a, from: /a, type: decimal, min: lots}\n"),
                  {"normalize.fields[0].min", "'lots'", "a number"}));
  EXPECT_TRUE(has(fields("    - {name: a, from: /a, type: timestamp, format: dd/mm/yyyy}\n"),
                  {"normalize.fields[0].format", "%-field"}));
  EXPECT_TRUE(has(fields("    - {name: a, from: /a, scale: 2}\n"),
                  {"normalize.fields[a].scale", "decimal only"}));
  EXPECT_TRUE(has(fields("    - {name: a, from: /a}\n    - {name: t, header: tenant}\n"),
                  {"normalize.fields[1].header", "sqs source's messages have attributes",
                   "write attribute: tenant"}));
  EXPECT_TRUE(has(fields("    - {name: a, from: /a, attribute: t}\n"),
                  {"normalize.fields[a]", "exactly one of from, const, meta, attribute, header"}));
  // A version whose list lacks a field the identity names.
  const std::string versions = sqs +
                               "normalize:\n  when:\n    from: /v\n    cases:\n"
                               "      \"1\": [{name: a, from: /a}, {name: b, from: /b}]\n"
                               "      \"2\": [{name: a, from: /x/a}]\n"
                               "identity:\n  versions:\n    V1: [a, b]\n";
  EXPECT_TRUE(has(error_of(versions), {"identity.versions.V1 names field 'b'",
                                       "normalize.when.cases.2 (with normalize.fields)"}));
  EXPECT_TRUE(has(error_of(sqs + "normalize:\n  when:\n    from: /v\n    absent: \"3\"\n"
                                 "    cases:\n      \"1\": [{name: a, from: /a}]\n"
                                 "identity:\n  versions:\n    V1: [a]\n"),
                  {"normalize.when.absent = 3", "expected one of normalize.when.cases (1)"}));
  EXPECT_TRUE(has(error_of(sqs + "normalize:\n  when:\n    from: /v\n    kases: {}\n"
                                 "identity:\n  versions:\n    V1: [a]\n"),
                  {"unknown key normalize.when.kases", "did you mean normalize.when.cases"}));
  // A column or log field must be in every version, with one type.
  EXPECT_TRUE(has(
      error_of(sqs + "normalize:\n  when:\n    from: /v\n    cases:\n"
                     "      \"1\": [{name: a, from: /a}, {name: t, from: /t, type: timestamp}]\n"
                     "      \"2\": [{name: a, from: /a}, {name: t, from: /t}]\n"
                     "identity:\n  versions:\n    V1: [a]\n"
                     "logging:\n  fields: [t]\n"),
      {"logging.fields",
       "'t' has type timestamp in one version and string in "
       "normalize.when.cases.2"}));
  // Typed columns whose names would collide in the table.
  EXPECT_TRUE(has(error_of(sqs + "normalize:\n  fields:\n    - {name: a, from: /a}\n"
                                 "    - {name: message.id, from: /m}\n"
                                 "identity:\n  versions:\n    V1: [a]\n"
                                 "sink:\n  type: postgres\n  postgres:\n    dsn: host=h\n"
                                 "    columns: [message.id]\n"),
                  {"sink.postgres.columns", "'message.id' would be the column message_id",
                   "the table has already"}));
  EXPECT_TRUE(has(error_of(sqs + "normalize:\n  fields:\n    - {name: c.id, from: /a}\n"
                                 "    - {name: c_id, from: /m}\n"
                                 "identity:\n  versions:\n    V1: [c.id]\n"
                                 "sink:\n  type: postgres\n  postgres:\n    dsn: host=h\n"
                                 "    columns: [c.id, c_id]\n"),
                  {"'c_id' would be the column c_id, which 'c.id' is too"}));
  // The example loads as it is, and its typed columns with sink.type: postgres.
  EXPECT_NO_THROW(load_config(std::string(SLUICE_SOURCE_DIR) + "/examples/orders-pipeline.yaml"));
  std::ifstream example(std::string(SLUICE_SOURCE_DIR) + "/examples/orders-pipeline.yaml");
  std::string text((std::istreambuf_iterator<char>(example)), std::istreambuf_iterator<char>());
  auto replace = [&](const std::string& from, const std::string& to) {
    const auto at = text.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);
  };
  replace("  type: sqlite\n", "  type: postgres\n");
  replace("  sqlite:\n    path: orders.db\n", "");
  replace("  # postgres:\n  #   columns:", "  postgres:\n    dsn: host=h\n    columns:");
  const auto c = parse_config(text, "orders-pipeline.yaml as postgres");
  EXPECT_EQ(c.sink_as<sluice::sinks::PostgresSettings>().options.columns.size(), 6u);
}

// filter, identity.key, max_messages_per_second, admin and name: each mistake names
// its key (and the environment variable it came from), the value and what was expected.
TEST(Config, OperationsMistakesAreRefusedWithTheKeyAndTheReason) {
  EXPECT_TRUE(has(error_of(with("filter:\n  - body: {price: [{numeric: [\">\", ten]}]}\n")),
                  {"filter[0].body.price[0].numeric[1]", "expected a number", "\"ten\""}));
  EXPECT_TRUE(has(error_of(with("filter:\n  - headers: {tenant: [acme]}\n")),
                  {"filter[0].headers", "expected body and/or attributes"}));
  EXPECT_TRUE(has(error_of(with("filter:\n  body: {a: [x]}\n")), {"filter", "a list of patterns"}));
  EXPECT_TRUE(has(error_of(with("filter:\n  - '{\"body\": '\n")),
                  {"filter[0]", "a JSON object as Lambda writes it"}));
  EXPECT_TRUE(has(error_of(with("  key: {header: producer-id}\n")),
                  {"identity.key.header", "sqs source's messages have attributes",
                   "{attribute: producer-id}"}));
  EXPECT_TRUE(has(error_of(with("  key: hash\n")), {"identity.key", "'hash'", "content"}));
  EXPECT_TRUE(has(error_of(with("  key: {attribute: \"\"}\n")), {"identity.key.attribute"}));
  EXPECT_TRUE(has(error_of("source:\n  type: rabbitmq\n  rabbitmq:\n    queue: q\n"
                           "normalize:\n  fields:\n    - {name: a, from: /a}\n"
                           "identity:\n  key: deduplication_id\n  versions:\n    V1: [a]\n"),
                  {"identity.key: deduplication_id", "rabbitmq source's messages have none"}));
  // On SQS, only a FIFO queue's messages carry one: a standard queue is refused at load.
  EXPECT_TRUE(has(error_of(with("  key: deduplication_id\n")),
                  {"identity.key: deduplication_id", "http://127.0.0.1:1/000000000000/q",
                   "standard queue", "does not end in .fifo"}));
  EXPECT_TRUE(
      has(error_of("source:\n  sqs:\n    queue_url: http://127.0.0.1:1/000000000000/q.fifo\n"
                   "    fifo: off\nnormalize:\n  fields:\n    - {name: a, from: /a}\n"
                   "identity:\n  key: deduplication_id\n  versions:\n    V1: [a]\n"),
          {"identity.key: deduplication_id", "source.sqs.fifo is off"}));
  EXPECT_EQ(error_of("source:\n  sqs:\n    queue_url: http://127.0.0.1:1/000000000000/q.fifo\n"
                     "normalize:\n  fields:\n    - {name: a, from: /a}\n"
                     "identity:\n  key: deduplication_id\n  versions:\n    V1: [a]\n"),
            "no error");
  EXPECT_TRUE(has(error_of(with("source:\n  max_messages_per_second: -5\n")),
                  {"source.max_messages_per_second", "-5", "0 (no limit), or from 0.001"}));
  EXPECT_TRUE(has(error_of(with("source:\n  max_messages_per_second: 1e-12\n")),
                  {"source.max_messages_per_second", "1e-12", "from 0.001 to 1000000"}));
  setenv("SLUICE_MAX_MESSAGES_PER_SECOND", "fast", 1);
  EXPECT_TRUE(has(error_of(kMinimal),
                  {"source.max_messages_per_second", "SLUICE_MAX_MESSAGES_PER_SECOND", "fast"}));
  unsetenv("SLUICE_MAX_MESSAGES_PER_SECOND");
  EXPECT_TRUE(
      has(error_of(with("name: \"my pipeline\"\n")), {"name", "'my pipeline'", "letters, digits"}));
  unsetenv("SLUICE_ADMIN_TOKEN");
  EXPECT_TRUE(
      has(error_of(with("metrics:\n  listen: 0.0.0.0:9464\nadmin:\n  enabled: true\n")),
          {"admin.enabled", "0.0.0.0:9464", "not a loopback address", "SLUICE_ADMIN_TOKEN"}));
  EXPECT_TRUE(has(error_of(with("metrics:\n  listen: \"\"\nadmin:\n  enabled: true\n")),
                  {"admin.enabled", "metrics.listen is empty"}));
  // With a token the same listener is accepted, and the token is never printed.
  setenv("SLUICE_ADMIN_TOKEN", "tok-123-secret", 1);
  const auto open =
      parse_config(with("metrics:\n  listen: 0.0.0.0:9464\nadmin:\n  enabled: true\n"));
  EXPECT_EQ(open.admin_token, "tok-123-secret");
  EXPECT_EQ(describe(open).find("tok-123-secret"), std::string::npos);
  unsetenv("SLUICE_ADMIN_TOKEN");
  // What the options set, when right.
  const auto c =
      parse_config(with("  key: {attribute: producer-id}\nname: orders\nsource:\n"
                        "  max_messages_per_second: 2.5\nfilter:\n"
                        "  - '{\"body\": {\"skuId\": [{\"prefix\": \"S\"}]}}'\n"
                        "  - body: {quantity: [0, null, ~, \"7\"]}\n"));
  EXPECT_EQ(c.name, "orders");
  EXPECT_EQ(c.container.max_messages_per_second, 2.5);
  EXPECT_EQ(c.transform.key, sluice::pipeline::TransformSpec::Key::header);
  EXPECT_EQ(c.transform.key_header, "producer-id");
  ASSERT_EQ(c.transform.filter.size(), 2u);
  EXPECT_EQ(c.transform.filter[1]["body"]["quantity"],
            nlohmann::json::parse(R"([0, null, null, "7"])"))
      << "YAML's plain scalars are typed, quoted ones are strings";
}

TEST(Config, RouteMistakesAreRefusedWithTheKey) {
  EXPECT_TRUE(
      has(error_of(with("route:\n  field: skuId\n")), {"route.tables", "expected at least one"}));
  EXPECT_TRUE(has(error_of(with("route:\n  field: skuId\n  tables: [a, b]\n")),
                  {"route.tables", "a mapping of value to table"}));
  EXPECT_TRUE(has(error_of(with("route:\n  field: skuId\n  tables: {A: records}\n")),
                  {"route.tables.A: records is sink.table already"}));
  EXPECT_TRUE(has(error_of(with("route:\n  field: skuId\n  tables: {A: REJECTS}\n")),
                  {"route.tables.A: REJECTS is sink.rejects_table already", "without case"}));
  EXPECT_TRUE(has(error_of(with("route:\n  field: skuId\n  tables: {A: Orders, B: orders}\n")),
                  {"route.tables.B: orders and Orders differ only in case"}));
  EXPECT_TRUE(
      has(error_of(with("route:\n  field: skuId\n  tables: {A: orders, B: uniq_orders_hash}\n")),
          {"route.tables.B: uniq_orders_hash is the unique index of orders already"}));
  EXPECT_TRUE(has(error_of(with("route:\n  field: skuId\n  tables: {A: sqlite_x}\n")),
                  {"route.tables.A", "not starting with sqlite_"}));
  EXPECT_TRUE(has(error_of(with("route:\n  field: skuId\n  tables: {A: \"a$b\"}\n")),
                  {"route.tables.A", "'a$b'", "without '$'"}));
  EXPECT_TRUE(
      has(error_of(with("route:\n  field: skuId\n  tables: {A: " + std::string(54, 't') + "}\n")),
          {"route.tables.A", "1 to 53 bytes"}));
  EXPECT_TRUE(has(error_of(with("route:\n  field: skuId\n  tables: {A: a}\n  unknown: drop\n")),
                  {"route.unknown", "'drop'", "default"}));
  EXPECT_TRUE(has(error_of(with("route:\n  field: nope\n  tables: {A: a}\n")),
                  {"route.field = nope", "expected a field of normalize.fields"}));
  const auto c = parse_config(
      with("route:\n  field: skuId\n  tables: {A: t_a, B: t_b, C: t_a}\n  unknown: reject\n"));
  EXPECT_EQ(c.sink_as<sluice::sinks::SqliteSettings>().options.routes,
            (std::vector<std::string>{"t_a", "t_b"}));
  EXPECT_TRUE(c.transform.route_unknown_rejected);
}

// Found by fuzz_config: a byte that is no UTF-8 reached a JSON value and threw past
// ConfigError. Raw bytes are refused with the line; an escape naming no character is
// refused by yaml-cpp, also with the line.
TEST(Config, TextThatIsNotUtf8IsRefusedWithWhereItIs) {
  EXPECT_TRUE(has(error_of(with("filter:\n  - body: {price: [{prefix: \"\xff\"}]}\n")),
                  {"not valid UTF-8 text (line 13)", "save the file as UTF-8"}));
  EXPECT_TRUE(has(error_of(with("filter:\n  - body: {price: [{prefix: \"\\ud800\"}]}\n")),
                  {"line 13", "invalid unicode"}));
  EXPECT_TRUE(has(error_of(with("filter:\n  - body: {\"\\ud800\": [a]}\n")),
                  {"line 13", "invalid unicode"}));
}

TEST(Config, TheSeveralPipelinesExampleLoads) {
  unsetenv("SLUICE_ADMIN_TOKEN");
  const auto configs =
      sluice::app::load_pipelines(std::string(SLUICE_SOURCE_DIR) + "/examples/multi-pipeline.yaml");
  ASSERT_EQ(configs.size(), 3u);
  EXPECT_EQ(configs[0].name, "inventory");
  EXPECT_EQ(configs[1].container.max_messages_per_second, 200);
  EXPECT_EQ(configs[1].transform.filter.size(), 1u);
  EXPECT_EQ(configs[2].source_driver->name(), "rabbitmq");
  for (const auto& c : configs) {
    EXPECT_TRUE(c.admin_enabled);
    EXPECT_EQ(c.transform.hash_versions.at("V1").size(), 4u) << c.name << ": the shared identity";
  }
}

// A quorum queue's delivery limit bounds the deliveries: Sluice refuses a failing record
// on its last delivery at the latest (its reason stored), never after the broker has
// dead-lettered it.
// A single-active-consumer queue has one consumer that receives: source.concurrency
// is 1 by default with it, and an explicit range over 1 is refused naming both keys.
TEST(Config, ASingleActiveConsumerQueueHasOneConsumer) {
  const std::string fields =
      "normalize:\n  fields:\n    - {name: a, from: /a}\nidentity:\n  versions:\n    V1: [a]\n";
  const std::string rabbit =
      "source:\n  type: rabbitmq\n  rabbitmq:\n    queue: q\n    single_active_consumer: true\n";
  const auto config = parse_config(rabbit + fields);
  EXPECT_EQ(config.container.min_concurrent_receives, 1);
  EXPECT_EQ(config.container.max_concurrent_receives, 1);
  EXPECT_EQ(
      parse_config(rabbit + "  concurrency: auto\n" + fields).container.max_concurrent_receives, 1);
  EXPECT_EQ(parse_config(rabbit + "  concurrency: 1\n" + fields).container.max_concurrent_receives,
            1);
  EXPECT_TRUE(has(
      error_of(rabbit + "  concurrency: 2-4\n" + fields),
      {"source.concurrency", "got 2-4", "expected 1", "source.rabbitmq.single_active_consumer"}));
  EXPECT_TRUE(has(error_of("source:\n  type: rabbitmq\n  rabbitmq:\n    queue: q\n"
                           "    single_active_consumer: maybe\n" +
                           fields),
                  {"source.rabbitmq.single_active_consumer", "maybe"}));
}

TEST(Config, AStreamHasOneConsumerAStartAndNoDeadLettering) {
  const std::string fields =
      "normalize:\n  fields:\n    - {name: a, from: /a}\nidentity:\n  versions:\n    V1: [a]\n";
  const std::string rabbit = "source:\n  type: rabbitmq\n  rabbitmq:\n    queue: q\n";
  for (const char* start : {"first", "last", "next", "0", "12345", "2026-12-01T08:00:00Z"}) {
    const auto config = parse_config(rabbit + "    stream_offset: \"" + start + "\"\n" + fields);
    EXPECT_EQ(config.container.max_concurrent_receives, 1) << start;
  }
  for (const char* bad : {"start", "-1", "2026-02-30T00:00:00Z", "2026-12-01T08:00:00",
                          "2026-12-01 08:00:00Z", "99999999999999999999"})
    EXPECT_TRUE(has(error_of(rabbit + "    stream_offset: \"" + bad + "\"\n" + fields),
                    {"source.rabbitmq.stream_offset", bad, "first, last, next"}))
        << bad;
  const std::string stream = rabbit + "    stream_offset: first\n";
  EXPECT_TRUE(has(error_of(stream + "  concurrency: 2\n" + fields),
                  {"source.concurrency", "got 2", "expected 1", "source.rabbitmq.stream_offset"}));
  EXPECT_TRUE(has(error_of(stream + "    dead_letter_exchange: true\n" + fields),
                  {"source.rabbitmq.dead_letter_exchange", "source.rabbitmq.stream_offset"}));
  EXPECT_TRUE(has(error_of(stream + "    single_active_consumer: true\n" + fields),
                  {"source.rabbitmq.single_active_consumer", "stream_offset"}));
}

TEST(Config, TheQueuesDeliveryLimitBoundsTheRecordFailures) {
  const std::string fields =
      "normalize:\n  fields:\n    - {name: a, from: /a}\nidentity:\n  versions:\n    V1: [a]\n";
  const std::string rabbit = "source:\n  type: rabbitmq\n  rabbitmq:\n    queue: q\n";
  EXPECT_EQ(parse_config(rabbit + fields).writer.max_record_failures, 5) << "no limit known";
  EXPECT_EQ(parse_config(rabbit + "    delivery_limit: 2\n" + fields).writer.max_record_failures, 3)
      << "lowered to the limit + 1 deliveries";
  EXPECT_EQ(parse_config(rabbit + "    delivery_limit: 20\n" + fields).writer.max_record_failures,
            5)
      << "a higher limit changes nothing";
  EXPECT_EQ(parse_config(rabbit + "    delivery_limit: 2\n" + fields +
                         "sink:\n  max_record_failures: 3\n")
                .writer.max_record_failures,
            3);
  EXPECT_TRUE(has(
      error_of(rabbit + "    delivery_limit: 2\n" + fields + "sink:\n  max_record_failures: 4\n"),
      {"sink.max_record_failures", "got 4", "at most 3", "source.rabbitmq.delivery_limit 2"}));
  EXPECT_TRUE(has(error_of(rabbit + "    delivery_limit: -1\n" + fields),
                  {"source.rabbitmq.delivery_limit", "-1"}));
  // `sluice config check` says so.
  EXPECT_TRUE(has(describe(parse_config(rabbit + "    delivery_limit: 2\n" + fields)),
                  {"a record refused after 3 failed deliveries (lowered from 5"}));
  EXPECT_TRUE(has(describe(parse_config(rabbit + fields)),
                  {"a record refused after 5 failed deliveries\n"}));
}

// A sink chosen or given in dotted keys (sink.type: x) or nested ones (sink: {type: x}),
// shared or a pipeline's own: each pipeline keeps its own sink's keys and drops the
// other pipelines'.
TEST(Config, PipelinesTakeTheirSinkFromDottedAndNestedKeysAlike) {
  const std::string common =
      "normalize:\n  fields:\n    - {name: a, from: /a}\nidentity:\n  versions:\n    V1: [a]\n";
  const std::string queue = "http://127.0.0.1:1/000000000000/";
  const std::string pipelines = "pipelines:\n  a:\n    source.sqs.queue_url: " + queue +
                                "qa\n  b:\n    source.sqs.queue_url: " + queue +
                                "qb\n    sink.type: sqlite\n    sink.sqlite.path: b.db\n";
  for (const std::string shared : {
           "sink.type: postgres\nsink:\n  postgres:\n    dsn: host=h\n",
           "sink:\n  type: postgres\nsink.postgres.dsn: host=h\n",
           "sink.type: postgres\nsink.postgres:\n  dsn: host=h\n",
       }) {
    std::vector<PipelineConfig> configs;
    ASSERT_NO_THROW(configs = parse_pipelines(shared + common + pipelines)) << shared;
    ASSERT_EQ(configs.size(), 2u);
    EXPECT_EQ(configs[0].sink_type, "postgres") << shared;
    EXPECT_EQ(configs[0].sink_as<sluice::sinks::PostgresSettings>().options.dsn, "host=h");
    EXPECT_EQ(configs[1].sink_type, "sqlite") << shared;
    EXPECT_EQ(configs[1].sink_as<sluice::sinks::SqliteSettings>().options.path, "b.db");
  }
  // A pipeline's own keys of a sink it does not choose are still refused.
  EXPECT_THROW(parse_pipelines(common + "pipelines:\n  a:\n    source.sqs.queue_url: " + queue +
                               "qa\n    sink.postgres.dsn: host=h\n"),
               ConfigError);
}

// A variable of a sink (or source) that is not chosen is not read, and said so.
TEST(Config, AVariableOfASinkNotChosenIsSaid) {
  setenv("SLUICE_POSTGRES_DSN", "host=h password=s3cret", 1);
  const auto c = parse_config(kMinimal);
  unsetenv("SLUICE_POSTGRES_DSN");
  EXPECT_EQ(c.sink_type, "sqlite");
  std::string warnings;
  for (const auto& w : c.warnings) warnings += w + "\n";
  EXPECT_TRUE(has(warnings, {"SLUICE_POSTGRES_DSN is set, but sink.type is sqlite",
                             "sink.postgres.dsn is not used", "sink.type: postgres"}))
      << warnings;
  EXPECT_EQ(warnings.find("s3cret"), std::string::npos);
}
