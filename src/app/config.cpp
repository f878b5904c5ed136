#include "app/config.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "amqp/connection.hpp"
#include "app/metrics.hpp"
#include "common/redact.hpp"
#include "sluice/aws/http.hpp"

namespace sluice::app {
std::optional<std::chrono::milliseconds> parse_duration(const std::string& text) {
  std::size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (...) {
    return std::nullopt;
  }
  const std::string unit = text.substr(used);
  long long factor = 0;
  if (unit == "ms")
    factor = 1;
  else if (unit == "s")
    factor = 1000;
  else if (unit == "m")
    factor = 60'000;
  else if (unit == "h")
    factor = 3'600'000;
  else
    return std::nullopt;
  long long ms = 0;
  if (__builtin_mul_overflow(v, factor, &ms)) return std::nullopt;  // never wrap
  return std::chrono::milliseconds(ms);
}

static std::string duration_expected(std::chrono::milliseconds min, std::chrono::milliseconds max) {
  return "a duration such as 250ms, 20s, 5m or 1h, from " + std::to_string(min.count()) + "ms to " +
         std::to_string(max.count()) + "ms";
}

std::chrono::milliseconds duration_flag(const std::string& flag, const std::string& value,
                                        std::chrono::milliseconds min,
                                        std::chrono::milliseconds max) {
  const auto d = parse_duration(value);
  if (!d || *d < min || *d > max)
    throw std::invalid_argument(flag + ": got '" + value + "', expected " +
                                duration_expected(min, max));
  return *d;
}

namespace {

// ------------------------------------------------------------------ value parsing

// An error about a secret that is safe to show: it repeats the value redacted (a URI
// with its password as ***), which says more than "not shown".
struct RedactedConfigError : ConfigError {
  using ConfigError::ConfigError;
};

std::string shown(const YAML::Node& node) {
  if (!node.IsDefined() || node.IsNull()) return "(empty)";
  if (node.IsScalar()) return "'" + node.Scalar() + "'";
  YAML::Emitter out;
  out << YAML::Flow << node;
  return out.c_str();
}

[[noreturn]] void bad(const std::string& key, const YAML::Node& node, const std::string& expected) {
  throw ConfigError(key + ": got " + shown(node) + ", expected " + expected);
}

std::string as_string(const YAML::Node& n, const std::string& key) {
  if (!n.IsScalar()) bad(key, n, "a string");
  return n.Scalar();
}

long long as_int(const YAML::Node& n, const std::string& key, long long min, long long max) {
  const std::string range = "an integer from " + std::to_string(min) + " to " + std::to_string(max);
  if (!n.IsScalar()) bad(key, n, range);
  std::size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(n.Scalar(), &used);
  } catch (...) {
    bad(key, n, range);
  }
  if (used != n.Scalar().size() || v < min || v > max) bad(key, n, range);
  return v;
}

bool as_bool(const YAML::Node& n, const std::string& key) {
  if (n.IsScalar()) {
    const std::string& s = n.Scalar();
    if (s == "true" || s == "yes" || s == "on") return true;
    if (s == "false" || s == "no" || s == "off") return false;
  }
  bad(key, n, "true or false");
}

std::chrono::milliseconds as_duration(const YAML::Node& n, const std::string& key,
                                      std::chrono::milliseconds min,
                                      std::chrono::milliseconds max) {
  const auto d = n.IsScalar() ? parse_duration(n.Scalar()) : std::nullopt;
  if (!d || *d < min || *d > max) bad(key, n, duration_expected(min, max));
  return *d;
}

// For limits the API takes in whole seconds (SQS WaitTimeSeconds, VisibilityTimeout):
// 500ms is refused, not silently made 0.
std::chrono::seconds as_whole_seconds(const YAML::Node& n, const std::string& key,
                                      std::chrono::seconds min, std::chrono::seconds max) {
  const auto d = as_duration(n, key, min, max);
  if (d.count() % 1000 != 0)
    bad(key, n,
        "whole seconds (the SQS API takes seconds), from " + std::to_string(min.count()) + "s to " +
            std::to_string(max.count()) + "s");
  return std::chrono::duration_cast<std::chrono::seconds>(d);
}

// An http(s) URL whose path names a queue: /ACCOUNT/NAME.
std::string as_queue_url(const YAML::Node& n, const std::string& key) {
  const std::string text = as_string(n, key);
  if (text.empty()) return text;
  if (text.find('@') != std::string::npos)
    throw ConfigError(key + ": got '" + common::redact_password(text) +
                      "', expected a queue URL without credentials in it (they come from the AWS "
                      "settings)");
  aws::Url url;
  try {
    url = aws::Url::parse(text);
  } catch (const std::exception&) {
    bad(key, n, "an SQS queue URL such as https://sqs.us-east-1.amazonaws.com/123456789012/orders");
  }
  const auto account_end = url.target.find('/', 1);
  if (url.target.size() < 4 || account_end == std::string::npos || account_end == 1 ||
      account_end + 1 >= url.target.size() ||
      url.target.find_first_of("/?# ", account_end + 1) != std::string::npos)
    bad(key, n,
        "an SQS queue URL whose path is /ACCOUNT/QUEUE_NAME, such as "
        "https://sqs.us-east-1.amazonaws.com/123456789012/orders");
  return text;
}

std::string as_endpoint_url(const YAML::Node& n, const std::string& key) {
  const std::string text = as_string(n, key);
  if (text.empty()) return text;
  if (text.find('@') != std::string::npos)
    throw ConfigError(key + ": got '" + common::redact_password(text) +
                      "', expected an endpoint URL without credentials in it");
  try {
    aws::Url::parse(text);
  } catch (const std::exception&) {
    bad(key, n, "an http:// or https:// URL such as http://127.0.0.1:4566");
  }
  return text;
}

// A file that must exist and be readable when given (certificates, keys).
std::string as_file_path_or_empty(const YAML::Node& n, const std::string& key) {
  const std::string path = as_string(n, key);
  if (path.empty()) return path;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec) || !std::ifstream(path))
    bad(key, n, "a readable file");
  return path;
}

std::string as_enum(const YAML::Node& n, const std::string& key,
                    const std::vector<std::string>& values) {
  std::string list;
  for (const auto& v : values) list += (list.empty() ? "" : ", ") + v;
  if (!n.IsScalar() || std::find(values.begin(), values.end(), n.Scalar()) == values.end())
    bad(key, n, "one of " + list);
  return n.Scalar();
}

std::vector<std::string> as_string_list(const YAML::Node& n, const std::string& key) {
  if (!n.IsSequence()) bad(key, n, "a list of strings");
  std::vector<std::string> out;
  for (const auto& item : n) out.push_back(as_string(item, key + "[]"));
  return out;
}

nlohmann::json as_json_scalar(const YAML::Node& n, const std::string& key) {
  if (!n.IsScalar()) bad(key, n, "a scalar value");
  const std::string& s = n.Scalar();
  if (n.Tag() == "!") return s;  // quoted in YAML: a string
  auto parsed = nlohmann::json::parse(s, nullptr, false);
  if (!parsed.is_discarded() && !parsed.is_object() && !parsed.is_array()) return parsed;
  return s;
}

// ------------------------------------------------------------------ the option table

using std::chrono::milliseconds;
using std::chrono::seconds;
using Apply = std::function<void(PipelineConfig&, const YAML::Node&, const std::string& key)>;

struct Option {
  Option(std::string key_, std::string type_, std::string default_, std::string doc_, Apply apply_,
         std::string env_ = {}, bool secret_ = false)
      : key(std::move(key_)),
        type(std::move(type_)),
        default_value(std::move(default_)),
        doc(std::move(doc_)),
        apply(std::move(apply_)),
        env(std::move(env_)),
        secret(secret_) {}
  std::string key;
  std::string type;
  std::string default_value;  // parsed through `apply` before the file is read
  std::string doc;
  Apply apply;
  std::string env;  // environment variable that overrides the file
  bool secret = false;
};

const std::vector<Option>& options() {
  static const std::vector<Option> table = {
      // --- source
      {"source.type", "enum: sqs | rabbitmq", "sqs",
       "The queue service: Amazon SQS (and SQS-compatible emulators) or RabbitMQ (AMQP 0-9-1).",
       [](auto& c, auto& n, auto& k) {
         c.source = as_enum(n, k, {"sqs", "rabbitmq"}) == "rabbitmq" ? SourceType::rabbitmq
                                                                     : SourceType::sqs;
       },
       "SLUICE_SOURCE_TYPE"},
      {"source.queue_url", "string", "", "SQS queue URL to drain (required for sqs).",
       [](auto& c, auto& n, auto& k) { c.sqs.queue_url = as_queue_url(n, k); }, "SLUICE_QUEUE_URL"},
      {"source.amqp_url", "string", "amqp://guest:guest@127.0.0.1:5672/%2f",
       "RabbitMQ: amqp://user:password@host:port/vhost (amqps:// for TLS; %2f is the vhost /).",
       [](auto& c, auto& n, auto& k) {
         const std::string text = as_string(n, k);
         try {
           amqp::parse_uri(text);
         } catch (const std::invalid_argument& e) {
           throw RedactedConfigError(k + ": " + e.what());  // shows the URI redacted
         }
         c.amqp.uri = text;
       },
       "SLUICE_AMQP_URL", true},
      {"source.queue", "string", "", "RabbitMQ: the queue to consume (required for rabbitmq).",
       [](auto& c, auto& n, auto& k) {
         c.amqp.queue = as_string(n, k);
         if (c.amqp.queue.size() > 255) bad(k, n, "a queue name of at most 255 bytes");
       },
       "SLUICE_AMQP_QUEUE"},
      {"source.prefetch", "integer", "250",
       "RabbitMQ: unacknowledged deliveries per consumer (basic.qos): max(prefetch, "
       "batch_size), at most max_in_flight / MAX consumers, so the broker never has more than "
       "max_in_flight out.",
       [](auto& c, auto& n, auto& k) {
         c.amqp.prefetch = static_cast<int>(as_int(n, k, 1, 65535));
       }},
      {"source.batch_size", "integer", "1",
       "RabbitMQ: deliveries that end a consumer's cycle (Spring's batchSize; see "
       "docs/rabbitmq.md).",
       [](auto& c, auto& n, auto& k) {
         c.amqp.batch_size = static_cast<int>(as_int(n, k, 1, 65535));
       }},
      {"source.receive_timeout", "duration", "1s",
       "RabbitMQ: a consumer's cycle ends after this long without a delivery.",
       [](auto& c, auto& n, auto& k) {
         c.amqp.receive_timeout = as_duration(n, k, milliseconds(10), seconds(3600));
       }},
      {"source.consecutive_active_trigger", "integer", "10",
       "RabbitMQ: a consumer active this many cycles in a row starts another (up to MAX).",
       [](auto& c, auto& n, auto& k) {
         c.amqp.consecutive_active_trigger = static_cast<int>(as_int(n, k, 1, 100000));
       }},
      {"source.consecutive_idle_trigger", "integer", "10",
       "RabbitMQ: a consumer idle this many cycles in a row stops (down to MIN).",
       [](auto& c, auto& n, auto& k) {
         c.amqp.consecutive_idle_trigger = static_cast<int>(as_int(n, k, 1, 100000));
       }},
      {"source.start_consumer_min_interval", "duration", "10s",
       "RabbitMQ: at least this long between two consumers started.",
       [](auto& c, auto& n, auto& k) {
         c.amqp.start_consumer_min_interval = as_duration(n, k, milliseconds(0), seconds(86400));
       }},
      {"source.stop_consumer_min_interval", "duration", "60s",
       "RabbitMQ: at least this long between two consumers stopped.",
       [](auto& c, auto& n, auto& k) {
         c.amqp.stop_consumer_min_interval = as_duration(n, k, milliseconds(0), seconds(86400));
       }},
      {"source.recovery_interval", "duration", "5s",
       "RabbitMQ: a lost connection or consumer is recovered after 500ms, doubling up to this.",
       [](auto& c, auto& n, auto& k) {
         c.amqp.recovery_interval = as_duration(n, k, milliseconds(100), seconds(3600));
       }},
      {"source.retry_hold_max", "duration", "5m",
       "RabbitMQ: a failed message is held (unacknowledged) for its backoff, at most this long, "
       "then nacked with requeue; keep it under the broker's consumer_timeout (30m).",
       [](auto& c, auto& n, auto& k) {
         c.amqp.retry_hold_max = as_duration(n, k, milliseconds(0), seconds(86400));
       }},
      {"source.amqp_heartbeat", "duration", "60s",
       "RabbitMQ: the connection heartbeat asked for (whole seconds; 0s: none); a broker silent "
       "for two of them is taken for lost.",
       [](auto& c, auto& n, auto& k) {
         const auto d = as_duration(n, k, milliseconds(0), seconds(65535));
         if (d.count() % 1000 != 0)
           bad(k, n, "whole seconds from 0s to 65535s (AMQP counts seconds)");
         c.amqp.heartbeat = std::chrono::duration_cast<seconds>(d);
       }},
      {"source.connection_name", "string", "sluice",
       "RabbitMQ: the connection's name as the broker shows it.",
       [](auto& c, auto& n, auto& k) { c.amqp.connection_name = as_string(n, k); }},
      {"source.ca_file", "string", "",
       "RabbitMQ over amqps://: the CA certificates (PEM) that signed the broker's; empty: the "
       "system's.",
       [](auto& c, auto& n, auto& k) { c.amqp.ca_file = as_file_path_or_empty(n, k); }},
      {"source.verify_hostname", "boolean", "true",
       "RabbitMQ over amqps://: the broker's certificate must name the URL's host.",
       [](auto& c, auto& n, auto& k) { c.amqp.verify_hostname = as_bool(n, k); }},
      {"source.dead_letter_exchange", "boolean", "false",
       "RabbitMQ: the queue has an x-dead-letter-exchange: rejected messages go there "
       "(basic.reject without requeue) as well as to the rejects table. false: they are kept in "
       "the rejects table and acked.",
       [](auto& c, auto& n, auto& k) { c.amqp_dead_letter_exchange = as_bool(n, k); }},
      {"source.wait_for_queue", "boolean", "false",
       "A queue that does not exist at start: wait for it to be created (logging) instead of "
       "exiting with code 2 (Spring's missingQueuesFatal, inverted).",
       [](auto& c, auto& n, auto& k) { c.wait_for_queue = as_bool(n, k); }},
      {"source.region", "string", "",
       "AWS region; empty: AWS_REGION, AWS_DEFAULT_REGION, the profile.",
       [](auto& c, auto& n, auto& k) { c.sqs.client.region = as_string(n, k); }, "SLUICE_REGION"},
      {"source.endpoint_url", "string", "",
       "SQS endpoint, for local emulators; empty: AWS_ENDPOINT_URL_SQS, AWS_ENDPOINT_URL, the "
       "profile, AWS.",
       [](auto& c, auto& n, auto& k) { c.sqs.client.endpoint_url = as_endpoint_url(n, k); },
       "SLUICE_SQS_ENDPOINT"},
      {"source.fifo", "enum: auto | on | off", "auto",
       "FIFO: each MessageGroupId in order into the sink, groups in parallel. auto: the queue's "
       "FifoQueue attribute (its URL's .fifo if unreadable).",
       [](auto& c, auto& n, auto& k) {
         const std::string f = as_enum(n, k, {"auto", "on", "off"});
         c.sqs.fifo = f == "on" ? FifoMode::on : f == "off" ? FifoMode::off : FifoMode::auto_detect;
       }},
      {"source.max_in_flight", "integer", "100",
       "Messages held at once (received, not yet settled): seed 001's maxConcurrentMessages. "
       "Bounds memory.",
       [](auto& c, auto& n, auto& k) {
         c.container.max_in_flight = static_cast<int>(as_int(n, k, 1, 100000));
       }},
      {"source.max_messages_per_poll", "integer", "10",
       "Messages asked for by one receive (SQS allows 10).",
       [](auto& c, auto& n, auto& k) {
         c.sqs.max_messages_per_poll = static_cast<int>(as_int(n, k, 1, 10));
       }},
      {"source.poll_wait", "duration", "20s",
       "Long-poll wait of each receive (SQS allows up to 20s).",
       [](auto& c, auto& n, auto& k) {
         c.sqs.poll_wait = as_whole_seconds(n, k, seconds(0), seconds(20));
       }},
      {"source.concurrency", "string", "1-4",
       "N or MIN-MAX (Spring's syntax), elastic between MIN and MAX: concurrent receives (SQS), "
       "consumers (RabbitMQ). auto: SQS receives found by measuring (doubled while throughput "
       "rises, settled where it plateaus, fewer when the sink is the bottleneck or receives "
       "come back partial, one when idle); RabbitMQ consumers elastic from 1 to max_in_flight / "
       "prefetch (at most 64).",
       [](auto& c, auto& n, auto& k) {
         try {
           parse_concurrency(as_string(n, k), c.container);
         } catch (const std::invalid_argument&) {
           bad(k, n, "N or MIN-MAX with 1 <= MIN <= MAX, e.g. 2-8, or auto");
         }
       }},
      {"source.consecutive_full_trigger", "integer", "3",
       "A receive loop that comes back full this many times in a row starts another (up to "
       "MAX).",
       [](auto& c, auto& n, auto& k) {
         c.container.consecutive_full_trigger = static_cast<int>(as_int(n, k, 1, 1000));
       }},
      {"source.consecutive_empty_trigger", "integer", "3",
       "A receive loop that comes back empty this many times in a row stops (down to MIN).",
       [](auto& c, auto& n, auto& k) {
         c.container.consecutive_empty_trigger = static_cast<int>(as_int(n, k, 1, 1000));
       }},
      {"source.start_receive_min_interval", "duration", "500ms",
       "At least this long between two receive loops started.",
       [](auto& c, auto& n, auto& k) {
         c.container.start_receive_min_interval = as_duration(n, k, milliseconds(0), seconds(3600));
       }},
      {"source.stop_receive_min_interval", "duration", "5s",
       "At least this long between two receive loops stopped.",
       [](auto& c, auto& n, auto& k) {
         c.container.stop_receive_min_interval = as_duration(n, k, milliseconds(0), seconds(3600));
       }},
      {"source.receive_error_backoff_max", "duration", "30s",
       "A failing receive (queue missing, endpoint down) is tried again after 200ms, doubling up "
       "to this.",
       [](auto& c, auto& n, auto& k) {
         c.container.error_backoff_max = as_duration(n, k, milliseconds(1), seconds(3600));
       }},
      {"source.visibility_timeout", "duration", "30s",
       "Visibility asked for on every receive; extended by the heartbeat while a message is held.",
       [](auto& c, auto& n, auto& k) {
         c.sqs.visibility_timeout = as_whole_seconds(n, k, seconds(1), seconds(43200));
       }},
      {"source.heartbeat", "boolean", "true",
       "Extend the visibility of held messages before it runs out.",
       [](auto& c, auto& n, auto& k) { c.container.heartbeat = as_bool(n, k); }},
      {"source.heartbeat_interval", "duration", "0s",
       "How often the heartbeat looks for messages to extend; 0s: a third of visibility_timeout.",
       [](auto& c, auto& n, auto& k) {
         c.container.heartbeat_interval = as_duration(n, k, milliseconds(0), seconds(43200));
       }},
      {"source.worker_threads", "integer", "0",
       "Threads that run the decode/normalize stages. 0: they run on the I/O thread right after "
       "each receive, with no hand-off (they never block, and take microseconds: the cheapest "
       "path). With large_payloads on, S3 fetches need threads of their own: 0 then means 16.",
       [](auto& c, auto& n, auto& k) {
         c.container.worker_threads = static_cast<int>(as_int(n, k, 0, 1024));
       }},
      {"source.handoff_capacity", "integer", "0",
       "Hand-offs (one or more handler calls each) queued for the worker threads before "
       "receives wait (backpressure); 0: max_in_flight. Unused when the stages run inline.",
       [](auto& c, auto& n, auto& k) {
         c.container.handoff_capacity = static_cast<int>(as_int(n, k, 0, 100000));
       }},
      {"source.failure_backoff", "duration", "1s",
       "A failed message comes back after this × 2^(receive count − 1), at most "
       "failure_backoff_max.",
       [](auto& c, auto& n, auto& k) {
         c.container.failure_backoff_base = as_duration(n, k, milliseconds(0), seconds(43200));
       }},
      {"source.failure_backoff_max", "duration", "12h",
       "The longest a failed message waits before it comes back (SQS allows 12h).",
       [](auto& c, auto& n, auto& k) {
         c.container.failure_backoff_max = as_duration(n, k, milliseconds(0), seconds(43200));
       }},
      {"source.shutdown_deadline", "duration", "30s",
       "On SIGTERM: how long running work may take before the process exits anyway.",
       [](auto& c, auto& n, auto& k) {
         c.container.shutdown_deadline = as_duration(n, k, milliseconds(0), seconds(3600));
       }},
      {"source.delete_batch_size", "integer", "10",
       "Deletes (acks) are sent in batches of this many (SQS allows 10) ...",
       [](auto& c, auto& n, auto& k) {
         c.sqs.delete_batch_size = static_cast<int>(as_int(n, k, 1, 10));
       }},
      {"source.delete_flush_interval", "duration", "100ms",
       "... or after this long; so are visibility changes. Always flushed on stop.",
       [](auto& c, auto& n, auto& k) {
         c.sqs.delete_flush_interval = as_duration(n, k, milliseconds(1), seconds(10));
       }},
      {"source.large_payloads.enabled", "boolean", "false",
       "SQS: bodies the AWS extended clients stored in S3 (an S3 pointer with the "
       "ExtendedPayloadSize attribute) are fetched before decode; the pipeline sees the "
       "real body (decode.max_body_bytes then defaults to max_bytes_in_flight, at most 1 GiB).",
       [](auto& c, auto& n, auto& k) { c.sqs.large_payloads.enabled = as_bool(n, k); }},
      {"source.large_payloads.max_bytes_in_flight", "integer", "268435456",
       "Payload bytes held at once; a handler call waits for room. A payload larger than this is "
       "rejected with reason payload_too_large.",
       [](auto& c, auto& n, auto& k) {
         c.sqs.large_payloads.max_bytes_in_flight =
             static_cast<std::uint64_t>(as_int(n, k, 1, 1LL << 40));
       }},
      {"source.large_payloads.delete_after_ack", "boolean", "false",
       "Delete each S3 object once its message is deleted from the queue (off by default, as "
       "in the Java extended client).",
       [](auto& c, auto& n, auto& k) { c.sqs.large_payloads.delete_after_ack = as_bool(n, k); }},
      {"source.large_payloads.region", "string", "", "The buckets' region; empty: the queue's.",
       [](auto& c, auto& n, auto& k) { c.sqs.large_payloads.s3.region = as_string(n, k); }},
      {"source.large_payloads.endpoint_url", "string", "",
       "S3 endpoint, for local emulators; empty: AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the "
       "profile, AWS.",
       [](auto& c, auto& n, auto& k) {
         c.sqs.large_payloads.s3.endpoint_url = as_endpoint_url(n, k);
       },
       "SLUICE_S3_ENDPOINT"},
      {"source.large_payloads.addressing", "enum: auto | path | virtual", "auto",
       "S3 addressing: auto is virtual-hosted on AWS's endpoints for host-safe bucket names, "
       "path-style elsewhere (emulators).",
       [](auto& c, auto& n, auto& k) {
         const std::string a = as_enum(n, k, {"auto", "path", "virtual"});
         c.sqs.large_payloads.s3.addressing = a == "path"      ? s3::AddressingStyle::path
                                              : a == "virtual" ? s3::AddressingStyle::virtual_hosted
                                                               : s3::AddressingStyle::auto_detect;
       }},
      // --- decode
      {"decode.max_body_bytes", "integer", "262144",
       "Larger bodies are rejected as malformed. With source.large_payloads.enabled the "
       "default is source.large_payloads.max_bytes_in_flight (at most 1 GiB).",
       [](auto& c, auto& n, auto& k) {
         c.max_body_bytes_set = true;
         c.transform.max_body_bytes = static_cast<std::size_t>(as_int(n, k, 1, 1 << 30));
       }},
      {"decode.max_depth", "integer", "64", "Deeper JSON nesting is rejected as malformed.",
       [](auto& c, auto& n, auto& k) {
         c.transform.max_depth = static_cast<std::size_t>(as_int(n, k, 2, 4096));
       }},
      {"decode.sns_envelope", "boolean", "false",
       "Bodies are SNS notifications: normalize their inner Message.",
       [](auto& c, auto& n, auto& k) { c.transform.unwrap_sns = as_bool(n, k); }},
      // --- normalize (the list is described by the field table below)
      {"normalize.fields", "list of fields", "",
       "The stable document: one entry per field, in order (see the field table).", nullptr},
      // --- identity
      {"identity.version", "string", "V1",
       "The hash version in force (seed 001's DocumentHashVersion).",
       [](auto& c, auto& n, auto& k) { c.transform.hash_version = as_string(n, k); }},
      {"identity.versions", "map of lists", "",
       "Hash versions: name -> the fields whose canonical values identify a record, e.g. V1: "
       "[skuId, locationId].",
       [](auto& c, auto& n, auto& k) {
         if (!n.IsMap()) bad(k, n, "a mapping of version name to a list of field names");
         c.transform.hash_versions.clear();
         for (const auto& entry : n) {
           const std::string version = as_string(entry.first, k);
           c.transform.hash_versions[version] = as_string_list(entry.second, k + "." + version);
         }
       }},
      {"identity.field", "string", "documentHash",
       "Document field (and unique index) holding the hash.",
       [](auto& c, auto& n, auto& k) {
         c.transform.hash_field = as_string(n, k);
         c.mongodb.hash_field = c.transform.hash_field;
       }},
      // --- sink
      {"sink.type", "enum: sqlite | postgres | mongodb", "sqlite", "Where records are written.",
       [](auto& c, auto& n, auto& k) {
         const std::string t = as_enum(n, k, {"sqlite", "postgres", "mongodb"});
         c.sink = t == "sqlite"     ? SinkType::sqlite
                  : t == "postgres" ? SinkType::postgres
                                    : SinkType::mongodb;
       }},
      {"sink.batch_size", "integer", "100", "Records per write (one round trip).",
       [](auto& c, auto& n, auto& k) {
         c.writer.batch_size = static_cast<std::size_t>(as_int(n, k, 1, 1000));
       }},
      {"sink.batch_timeout", "duration", "20ms", "How long a writer waits to fill a batch.",
       [](auto& c, auto& n, auto& k) {
         c.writer.batch_timeout = as_duration(n, k, milliseconds(0), seconds(10));
       }},
      {"sink.writers", "integer", "2", "Writer threads, each with its own connection.",
       [](auto& c, auto& n, auto& k) { c.writer.writers = static_cast<int>(as_int(n, k, 1, 64)); }},
      {"sink.max_attempts", "integer", "5",
       "Attempts per batch while the database fails; then its messages are nacked (redelivered "
       "later).",
       [](auto& c, auto& n, auto& k) {
         c.writer.max_attempts = static_cast<int>(as_int(n, k, 1, 1000));
       }},
      {"sink.max_record_failures", "integer", "5",
       "A record the database fails on its own (a MongoDB write error whose code is not known "
       "to be permanent, a write concern not met) this many deliveries in a row is rejected "
       "(sink_refused) instead of coming back again.",
       [](auto& c, auto& n, auto& k) {
         c.writer.max_record_failures = static_cast<int>(as_int(n, k, 1, 1000));
       }},
      {"sink.table", "string", "records",
       "Table (SQLite, PostgreSQL) or collection (MongoDB) for records.",
       [](auto& c, auto& n, auto& k) {
         c.sqlite.table = c.postgres.table = c.mongodb.collection = as_string(n, k);
       }},
      {"sink.rejects_table", "string", "rejects", "Table or collection for rejected messages.",
       [](auto& c, auto& n, auto& k) {
         c.sqlite.rejects_table = c.postgres.rejects_table = c.mongodb.rejects_collection =
             as_string(n, k);
       }},
      {"sink.sqlite.path", "string", "sluice.db", "SQLite database file (WAL mode).",
       [](auto& c, auto& n, auto& k) { c.sqlite.path = as_string(n, k); }, "SLUICE_SQLITE_PATH"},
      {"sink.sqlite.synchronous", "enum: FULL | NORMAL", "FULL",
       "FULL: a commit survives power loss; NORMAL: it survives a process crash.",
       [](auto& c, auto& n, auto& k) {
         c.sqlite.synchronous = as_enum(n, k, {"FULL", "NORMAL"});
       }},
      {"sink.postgres.dsn", "string", "", "libpq connection string (required for postgres).",
       [](auto& c, auto& n, auto& k) { c.postgres.dsn = as_string(n, k); }, "SLUICE_POSTGRES_DSN",
       true},
      {"sink.postgres.query_timeout", "duration", "30s",
       "Longest wait for PostgreSQL to answer one call (a frozen server or network): then the "
       "connection is dropped and the batch tried again on a new one. Also the server's "
       "statement_timeout.",
       [](auto& c, auto& n, auto& k) {
         c.postgres.query_timeout = as_duration(n, k, milliseconds(100), seconds(3600));
       }},
      {"sink.postgres.columns", "list of strings", "",
       "Normalized fields also written as typed columns beside the JSONB document.",
       [](auto& c, auto& n, auto& k) {
         c.postgres.columns.clear();
         for (const auto& name : as_string_list(n, k))
           c.postgres.columns.push_back({name, pipeline::FieldType::string});
       }},
      {"sink.mongodb.uri", "string", "", "MongoDB connection URI (required for mongodb).",
       [](auto& c, auto& n, auto& k) { c.mongodb.uri = as_string(n, k); }, "SLUICE_MONGODB_URI",
       true},
      {"sink.mongodb.database", "string", "sluice", "MongoDB database.",
       [](auto& c, auto& n, auto& k) { c.mongodb.database = as_string(n, k); }},
      {"sink.mongodb.write_concern", "string", "majority",
       "majority, or a number of acknowledging nodes (1 or more; unacknowledged writes are "
       "refused).",
       [](auto& c, auto& n, auto& k) {
         const std::string w = as_string(n, k);
         // w: 0 (unacknowledged) is refused: we would ack what the server may not have.
         if (w != "majority") {
           try {
             as_int(n, k, 1, 50);
           } catch (const ConfigError&) {
             bad(k, n,
                 "\"majority\" or a number of nodes from 1 to 50 (0, unacknowledged, is "
                 "refused)");
           }
         }
         c.mongodb.write_concern = w;
       }},
      {"sink.mongodb.id_from_hash", "boolean", "false",
       "Identity in _id (derived from the hash) instead of the seed's separate unique index.",
       [](auto& c, auto& n, auto& k) { c.mongodb.id_from_hash = as_bool(n, k); }},
      // --- dead letters
      {"dead_letter.queue_url", "string", "",
       "SQS queue for rejected messages: the body, the reason and the original message "
       "attributes as String values (Binary ones base64), as many as fit in SQS's 10 beside "
       "Sluice's three; empty: none.",
       [](auto& c, auto& n, auto& k) { c.sqs.dead_letter_queue_url = as_queue_url(n, k); },
       "SLUICE_DEAD_LETTER_QUEUE_URL"},
      {"dead_letter.table", "boolean", "true",
       "Also keep rejected messages in the sink's rejects table.",
       [](auto& c, auto& n, auto& k) { c.writer.rejects_table = as_bool(n, k); }},
      // --- operations
      {"metrics.listen", "string", "127.0.0.1:9464",
       "Address of /metrics, /healthz and /readyz (loopback by default); empty: off.",
       [](auto& c, auto& n, auto& k) {
         c.metrics_listen = n.IsNull() ? "" : as_string(n, k);
         if (c.metrics_listen.empty()) return;
         try {
           parse_listen_address(c.metrics_listen);
         } catch (const std::invalid_argument& e) {
           throw ConfigError(k + ": " + e.what());  // "got '...', expected ..."
         }
       },
       "SLUICE_METRICS_LISTEN"},
      {"autoscale.period", "duration", "1m",
       "The in-flight signal's averaging period (seed 004; exported as sluice_autoscale_* and "
       "GET /autoscale).",
       [](auto& c, auto& n, auto& k) {
         c.autoscale.period = as_duration(n, k, milliseconds(1000), seconds(3600));
       }},
      {"autoscale.periods", "integer", "5", "Periods whose largest average counts.",
       [](auto& c, auto& n, auto& k) {
         c.autoscale.periods = static_cast<int>(as_int(n, k, 1, 1000));
       }},
      {"autoscale.spare", "integer", "1", "Idle tasks kept ready (seed 004: 1 or 2).",
       [](auto& c, auto& n, auto& k) {
         c.autoscale.spare = static_cast<int>(as_int(n, k, 0, 10000));
       }},
      {"autoscale.capacity", "integer", "0",
       "Messages one task works on at once; 0: this pipeline's max_in_flight.",
       [](auto& c, auto& n, auto& k) {
         c.autoscale_capacity = static_cast<int>(as_int(n, k, 0, 1'000'000));
       }},
      {"autoscale.running_tasks", "integer", "1",
       "Tasks running the pipeline (the utilization's denominator; desired_tasks does not "
       "need it).",
       [](auto& c, auto& n, auto& k) { c.autoscale_running = as_int(n, k, 0, 1'000'000); },
       "SLUICE_AUTOSCALE_RUNNING_TASKS"},
      {"logging.level", "enum: trace | debug | info | warn | error", "info", "Log level.",
       [](auto& c, auto& n, auto& k) {
         c.log_level = as_enum(n, k, {"trace", "debug", "info", "warn", "error"});
       },
       "SLUICE_LOG_LEVEL"},
      {"logging.fields", "list of strings", "",
       "Normalized fields carried in every log line about a message (e.g. skuId).",
       [](auto& c, auto& n, auto& k) { c.log_fields = as_string_list(n, k); }},
  };
  return table;
}

struct FieldOption {
  std::string key;
  std::string type;
  std::string doc;
  std::function<void(pipeline::FieldSpec&, const YAML::Node&, const std::string&)> apply;
};

const std::vector<FieldOption>& field_options() {
  static const std::vector<FieldOption> table = {
      {"name", "string", "Name in the normalized document (required).",
       [](auto& f, auto& n, auto& k) { f.name = as_string(n, k); }},
      {"from", "JSON pointer", "Where the value is in the body, e.g. /item/sku.",
       [](auto& f, auto& n, auto& k) { f.pointer = as_string(n, k); }},
      {"type", "enum: string | integer | number | boolean | json",
       "Type to convert to (\"42\" becomes 42 for integer); a value that does not convert is "
       "schema drift.",
       [](auto& f, auto& n, auto& k) {
         const std::string t = as_enum(n, k, {"string", "integer", "number", "boolean", "json"});
         f.type = t == "string"    ? pipeline::FieldType::string
                  : t == "integer" ? pipeline::FieldType::integer
                  : t == "number"  ? pipeline::FieldType::number
                  : t == "boolean" ? pipeline::FieldType::boolean
                                   : pipeline::FieldType::json;
       }},
      {"required", "boolean", "Missing (or null) is a validation reject. Default false.",
       [](auto& f, auto& n, auto& k) { f.required = as_bool(n, k); }},
      {"default", "scalar", "Value used when the field is absent and not required.",
       [](auto& f, auto& n, auto& k) { f.default_value = as_json_scalar(n, k); }},
      {"const", "scalar", "A constant value instead of `from`.",
       [](auto& f, auto& n, auto& k) { f.constant = as_json_scalar(n, k); }},
      {"meta",
       "enum: message_id | sent_time | received_time | receive_count | source | group_id | "
       "sequence_number | sns_message_id | sns_topic_arn | sns_timestamp | sns_subject | "
       "sns_signature | sns_signature_version | sns_signing_cert_url",
       "A message property instead of `from`. group_id and sequence_number are a FIFO message's "
       "MessageGroupId and SequenceNumber (a decimal string; null when the queue does not send "
       "them). sns_* are the SNS envelope's MessageId, TopicArn, Timestamp, Subject, Signature, "
       "SignatureVersion and SigningCertURL (with decode.sns_envelope; null when absent).",
       [](auto& f, auto& n, auto& k) {
         static const std::pair<const char*, pipeline::MetaField> names[] = {
             {"message_id", pipeline::MetaField::message_id},
             {"sent_time", pipeline::MetaField::sent_time},
             {"received_time", pipeline::MetaField::received_time},
             {"receive_count", pipeline::MetaField::receive_count},
             {"source", pipeline::MetaField::source},
             {"group_id", pipeline::MetaField::group_id},
             {"sequence_number", pipeline::MetaField::sequence_number},
             {"sns_message_id", pipeline::MetaField::sns_message_id},
             {"sns_topic_arn", pipeline::MetaField::sns_topic_arn},
             {"sns_timestamp", pipeline::MetaField::sns_timestamp},
             {"sns_subject", pipeline::MetaField::sns_subject},
             {"sns_signature", pipeline::MetaField::sns_signature},
             {"sns_signature_version", pipeline::MetaField::sns_signature_version},
             {"sns_signing_cert_url", pipeline::MetaField::sns_signing_cert_url}};
         std::vector<std::string> allowed;
         for (const auto& [name, field] : names) allowed.emplace_back(name);
         const std::string m = as_enum(n, k, allowed);
         for (const auto& [name, field] : names)
           if (m == name) f.meta = field;
       }},
  };
  return table;
}

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j)
      cur[j] =
          std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

[[noreturn]] void unknown_key(const std::string& key, const std::vector<std::string>& known) {
  std::string best;
  std::size_t best_distance = 4;
  for (const auto& k : known) {
    const auto d = edit_distance(key, k);
    if (d < best_distance) best = k, best_distance = d;
  }
  throw ConfigError("unknown key " + key + (best.empty() ? "" : "; did you mean " + best + "?"));
}

// Every value goes through here: errors name the key and the environment variable
// that can set it, and a secret's value is never repeated.
void apply_option(const Option& o, PipelineConfig& config, const YAML::Node& node,
                  const std::string& key) {
  try {
    o.apply(config, node, key);
  } catch (const ConfigError& e) {
    std::string what = o.secret && !dynamic_cast<const RedactedConfigError*>(&e)
                           ? key + ": expected " + o.type + " (the value is secret: not shown)"
                           : e.what();
    if (!o.env.empty() && what.find(o.env) == std::string::npos)
      what += " [key " + o.key + ", environment variable " + o.env + "]";
    throw ConfigError(what);
  }
}

const Option* find_option(const std::string& key) {
  for (const auto& o : options())
    if (o.key == key) return &o;
  return nullptr;
}

bool is_section(const std::string& key) {
  for (const auto& o : options())
    if (o.key.rfind(key + ".", 0) == 0) return true;
  return false;
}

// Every option and every section above one, for "did you mean" suggestions.
std::vector<std::string> all_keys() {
  std::set<std::string> keys;
  for (const auto& o : options()) {
    keys.insert(o.key);
    for (auto dot = o.key.find('.'); dot != std::string::npos; dot = o.key.find('.', dot + 1))
      keys.insert(o.key.substr(0, dot));
  }
  return {keys.begin(), keys.end()};
}

void apply_fields(PipelineConfig& config, const YAML::Node& list, const std::string& key) {
  if (!list.IsSequence()) bad(key, list, "a list of fields");
  config.transform.fields.clear();
  std::vector<std::string> known;
  for (const auto& o : field_options()) known.push_back(o.key);
  for (std::size_t i = 0; i < list.size(); ++i) {
    const YAML::Node item = list[i];
    const std::string item_key = key + "[" + std::to_string(i) + "]";
    if (!item.IsMap()) bad(item_key, item, "a mapping with name and from, const or meta");
    pipeline::FieldSpec field;
    for (const auto& entry : item) {
      const std::string name = entry.first.Scalar();
      auto it = std::find_if(field_options().begin(), field_options().end(),
                             [&](const FieldOption& o) { return o.key == name; });
      if (it == field_options().end()) {
        std::vector<std::string> qualified;
        for (const auto& k : known) qualified.push_back(item_key + "." + k);
        unknown_key(item_key + "." + name, qualified);
      }
      it->apply(field, entry.second, item_key + "." + name);
    }
    config.transform.fields.push_back(std::move(field));
  }
}

void walk(PipelineConfig& config, const YAML::Node& node, const std::string& prefix) {
  for (const auto& entry : node) {
    const std::string key =
        prefix.empty() ? entry.first.Scalar() : prefix + "." + entry.first.Scalar();
    if (key == "normalize.fields") {
      apply_fields(config, entry.second, key);
    } else if (const Option* option = find_option(key)) {
      apply_option(*option, config, entry.second, key);
    } else if (is_section(key)) {
      if (!entry.second.IsMap()) bad(key, entry.second, "a mapping");
      walk(config, entry.second, key);
    } else {
      unknown_key(key, all_keys());
    }
  }
}

void finalize(PipelineConfig& c) {
  if (c.source == SourceType::sqs && c.sqs.queue_url.empty())
    throw ConfigError("source.queue_url: missing, expected an SQS queue URL");
  if (c.source == SourceType::rabbitmq) {
    if (c.amqp.queue.empty())
      throw ConfigError(
          "source.queue: missing, expected the RabbitMQ queue's name (source.type is rabbitmq)");
    // Spring's concurrency: consumers. The container's own receive loop is single:
    // a push source's receive only takes what has arrived.
    if (c.container.auto_concurrency)
      c.container.max_concurrent_receives =
          std::clamp(c.container.max_in_flight / std::max(1, c.amqp.prefetch), 1, 64);
    c.amqp.min_consumers = c.container.min_concurrent_receives;
    c.amqp.max_consumers = c.container.max_concurrent_receives;
    if (c.amqp.max_consumers > c.container.max_in_flight)
      throw ConfigError("source.concurrency: got " + std::to_string(c.amqp.max_consumers) +
                        " consumers at most, expected at most source.max_in_flight (" +
                        std::to_string(c.container.max_in_flight) +
                        "): each consumer holds at least one delivery");
    if (c.amqp.retry_hold_max < c.container.failure_backoff_base)
      c.container.failure_backoff_base = c.amqp.retry_hold_max;
  }
  // Fetched payloads are the bodies decode sees: by default it takes what the
  // budget can hold.
  if (c.source == SourceType::sqs && c.sqs.large_payloads.enabled && !c.max_body_bytes_set)
    c.transform.max_body_bytes = static_cast<std::size_t>(
        std::min<std::uint64_t>(c.sqs.large_payloads.max_bytes_in_flight, 1u << 30));
  c.container.name = "pipeline";
  c.container.ack_mode = AckMode::manual;  // the sink writer settles each message
  // The stages are quick and never block (the writers do the I/O), so a received
  // batch is handled in one worker call: one thread hand-off per poll, not per message.
  c.container.listener_mode = ListenerMode::batch;
  c.writer.dead_letter_queue = c.source == SourceType::sqs ? !c.sqs.dead_letter_queue_url.empty()
                                                           : c.amqp_dead_letter_exchange;
  // The library's checks speak of its own option names: say the YAML keys instead.
  try {
    validate(c.container);
    if (c.source == SourceType::sqs)
      validate(c.sqs);
    else
      validate(c.amqp);
  } catch (const std::invalid_argument& e) {
    std::string what = e.what();
    static const std::pair<const char*, const char*> keys[] = {
        {"container option failure_backoff_base", "source.failure_backoff"},
        {"at least failure_backoff_base", "at least source.failure_backoff"},
        {"container option error_backoff_max", "source.receive_error_backoff_max"},
        {"container option min_concurrent_receives", "source.concurrency (MIN)"},
        {"container option max_concurrent_receives", "source.concurrency (MAX)"},
        {"container option ", "source."},
        {"SQS source option ", "source."},
        {"AMQP source option uri", "source.amqp_url"},
        {"AMQP source option min_consumers", "source.concurrency (MIN)"},
        {"AMQP source option max_consumers", "source.concurrency (MAX)"},
        {"AMQP source option ", "source."}};
    for (const auto& [from, to] : keys)
      if (auto at = what.find(from); at != std::string::npos)
        what.replace(at, std::string_view(from).size(), to);
    throw ConfigError(what);
  }
  // A heartbeat that comes less often than half the visibility can let a held message
  // reappear: refused here rather than corrected at run time.
  if (c.source == SourceType::sqs && c.container.heartbeat &&
      c.container.heartbeat_interval.count() > 0 &&
      c.container.heartbeat_interval * 2 > c.sqs.visibility_timeout)
    throw ConfigError("source.heartbeat_interval: got " +
                      std::to_string(c.container.heartbeat_interval.count()) +
                      "ms, expected at most half of source.visibility_timeout (" +
                      std::to_string(c.sqs.visibility_timeout.count()) + "s)");
  try {
    pipeline::validate(c.transform);
  } catch (const std::invalid_argument& e) {
    throw ConfigError(e.what());
  }
  // Typed columns take the type of their field.
  for (auto& column : c.postgres.columns) {
    auto it = std::find_if(c.transform.fields.begin(), c.transform.fields.end(),
                           [&](const auto& f) { return f.name == column.field; });
    if (it == c.transform.fields.end())
      throw ConfigError("sink.postgres.columns: '" + column.field +
                        "' is not one of normalize.fields");
    column.type = it->type;
  }
  for (const auto& name : c.log_fields)
    if (std::none_of(c.transform.fields.begin(), c.transform.fields.end(),
                     [&](const auto& f) { return f.name == name; }))
      throw ConfigError("logging.fields: '" + name + "' is not one of normalize.fields");
  if (c.sink == SinkType::postgres && c.postgres.dsn.empty())
    throw ConfigError(
        "sink.postgres.dsn: missing, expected a libpq connection string (sink.type is postgres)");
  if (c.sink == SinkType::mongodb && c.mongodb.uri.empty())
    throw ConfigError(
        "sink.mongodb.uri: missing, expected a mongodb:// URI (sink.type is mongodb)");
  if (c.sink == SinkType::sqlite && c.writer.writers > 1)
    c.writer.writers = 1;  // one writer per file
}

}  // namespace

PipelineConfig parse_config(const std::string& yaml_text, const std::string& origin) {
  PipelineConfig config;
  for (const auto& o : options())
    if (!o.default_value.empty() && o.apply)
      o.apply(config, YAML::Load(o.default_value), o.key + " (default)");
  config.max_body_bytes_set = false;  // only the file or the environment set it
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    throw ConfigError(origin + ": not valid YAML: " + e.what());
  }
  if (!root.IsNull()) {
    if (!root.IsMap()) throw ConfigError(origin + ": expected a mapping at the top level");
    try {
      walk(config, root, "");
    } catch (const ConfigError& e) {
      throw ConfigError(origin + ": " + e.what());
    }
  }
  for (const auto& o : options()) {
    if (o.env.empty()) continue;
    if (const char* value = std::getenv(o.env.c_str()); value && *value) {
      const YAML::Node node{std::string(value)};
      try {
        apply_option(o, config, node, o.key + " (from " + o.env + ")");
      } catch (const ConfigError& e) {
        throw ConfigError(std::string("environment: ") + e.what());
      }
    }
  }
  try {
    finalize(config);
  } catch (const ConfigError& e) {
    throw ConfigError(origin + ": " + e.what());
  }
  return config;
}

PipelineConfig load_config(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw ConfigError(path + ": is a directory, expected a YAML configuration file");
  std::ifstream in(path);
  if (!in)
    throw ConfigError(path + ": cannot read the configuration file (" + std::strerror(errno) + ")");
  std::stringstream text;
  text << in.rdbuf();
  return parse_config(text.str(), path);
}

namespace {
// A Markdown table cell: pipes (as in enum lists) must not end the cell.
std::string cell(const std::string& text) {
  std::string out;
  for (char c : text) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}
}  // namespace

std::string configuration_markdown() {
  std::ostringstream out;
  out << "# Configuration\n\n"
      << "Generated by `sluice config docs` from the option table in `src/app/config.cpp`\n"
      << "(a test keeps this file and the table in step). Durations take a unit: `250ms`,\n"
      << "`20s`, `5m`, `1h`. Unknown keys, wrong types and impossible values are errors that\n"
      << "name the key, the value and what was expected. Environment variables override the\n"
      << "file. AWS credentials and region come from the usual AWS places (see README).\n\n"
      << "| key | type | default | environment | meaning |\n|---|---|---|---|---|\n";
  for (const auto& o : options())
    out << "| `" << o.key << "` | " << cell(o.type) << " | "
        << (o.default_value.empty() ? "" : "`" + o.default_value + "`") << " | "
        << (o.env.empty() ? "" : "`" + o.env + "`") << " | " << cell(o.doc)
        << (o.secret ? " Secret: shown redacted." : "") << " |\n";
  out << "\n## Fields of `normalize.fields[]`\n\nEach field takes exactly one of `from`, `const`, "
         "`meta`.\n\n"
      << "| key | type | meaning |\n|---|---|---|\n";
  for (const auto& f : field_options())
    out << "| `" << f.key << "` | " << cell(f.type) << " | " << cell(f.doc) << " |\n";
  out << "\n## Reject reasons\n\n"
      << "| reason | when |\n|---|---|\n"
      << "| `malformed` | the body is not JSON (the parser's reason), starts with a byte-order "
         "mark, has a key twice in one object, is larger than `decode.max_body_bytes`, nests "
         "deeper than `decode.max_depth`, or is not the expected SNS envelope |\n"
      << "| `validation` | a required field is missing or null |\n"
      << "| `schema_drift` | a field does not convert to its type, or the body is not an object "
         "|\n"
      << "| `sink_refused` | the database refuses the record for good (PostgreSQL SQLSTATE "
         "classes 22 and 23, SQLite constraint/too big/mismatch, a MongoDB write error whose "
         "code is known to be permanent), or the record failed on its own "
         "`sink.max_record_failures` deliveries in a row; the detail is the database's message. "
         "Its batch-mates are written. |\n";
  return out.str();
}

std::string describe(const PipelineConfig& c) {
  std::ostringstream out;
  if (c.source == SourceType::rabbitmq)
    out << "source: rabbitmq " << common::redact_password(c.amqp.uri) << " queue " << c.amqp.queue
        << " (consumers " << c.amqp.min_consumers << "-" << c.amqp.max_consumers << ", prefetch "
        << c.amqp.prefetch << ", max_in_flight " << c.container.max_in_flight << ")\n";
  else
    out << "source: " << c.sqs.queue_url << " (receives "
        << (c.container.auto_concurrency
                ? std::string("auto, at most ") +
                      std::to_string(
                          std::clamp(c.container.max_in_flight / 10, 1, kMaxAutoReceives))
                : std::to_string(c.container.min_concurrent_receives) + "-" +
                      std::to_string(c.container.max_concurrent_receives))
        << ", max_in_flight " << c.container.max_in_flight << ")\n";
  out << "sink: "
      << (c.sink == SinkType::sqlite ? "sqlite " + c.sqlite.path
          : c.sink == SinkType::postgres
              ? std::string("postgres (dsn redacted)")
              : std::string("mongodb (uri redacted) ") + c.mongodb.database)
      << ", batch " << c.writer.batch_size << ", writers " << c.writer.writers << "\n";
  out << "identity: " << c.transform.hash_version << " over";
  for (const auto& f : c.transform.hash_versions.at(c.transform.hash_version)) out << " " << f;
  out << "\n";
  return out.str();
}

}  // namespace sluice::app
