#include "app/config.hpp"

#include <simdjson.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "app/admin.hpp"
#include "app/http_endpoint.hpp"
#include "common/redact.hpp"

namespace sluice::app {
using namespace config;

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

// ASCII letters in lower case (SQLite compares names so; PostgreSQL's quoted names do not).
std::string lowered(std::string text) {
  for (auto& ch : text)
    if (ch >= 'A' && ch <= 'Z') ch = static_cast<char>(ch - 'A' + 'a');
  return text;
}

// A number as written (1.10 stays 1.10): the bounds of a decimal are compared exactly.
std::string as_decimal_text(const YAML::Node& n, const std::string& key) {
  if (!n.IsScalar()) bad(key, n, "a number");
  std::string why;
  if (!pipeline::canonical_decimal(n.Scalar(), std::nullopt, why)) bad(key, n, "a number");
  return n.Scalar();
}

nlohmann::json as_json_scalar(const YAML::Node& n, const std::string& key) {
  if (!n.IsScalar()) bad(key, n, "a scalar value");
  const std::string& s = n.Scalar();
  if (n.Tag() == "!") return s;  // quoted in YAML: a string
  if (s == "~") return nullptr;
  auto parsed = nlohmann::json::parse(s, nullptr, false);
  if (!parsed.is_discarded() && !parsed.is_object() && !parsed.is_array()) return parsed;
  return s;
}

// A YAML tree as JSON: scalars typed as YAML reads them (quoted: a string).
nlohmann::json as_json(const YAML::Node& n, const std::string& key) {
  if (n.IsMap()) {
    auto object = nlohmann::json::object();
    for (const auto& entry : n) {
      if (!entry.first.IsScalar()) bad(key, entry.first, "field names that are text");
      const std::string name = entry.first.Scalar();
      if (object.contains(name)) bad(key + "." + name, entry.second, "each key once");
      object[name] = as_json(entry.second, key + "." + name);
    }
    return object;
  }
  if (n.IsSequence()) {
    auto array = nlohmann::json::array();
    for (std::size_t i = 0; i < n.size(); ++i)
      array.push_back(as_json(n[i], key + "[" + std::to_string(i) + "]"));
    return array;
  }
  if (n.IsNull()) return nullptr;
  return as_json_scalar(n, key);
}

// filter: a list of patterns, each a mapping or a JSON text (pasted from a Lambda
// FilterCriteria's Pattern).
nlohmann::json as_filter(const YAML::Node& n, const std::string& key) {
  if (!n.IsSequence()) bad(key, n, "a list of patterns, e.g. - body: {type: [OrderPlaced]}");
  auto patterns = nlohmann::json::array();
  for (std::size_t i = 0; i < n.size(); ++i) {
    const std::string item = key + "[" + std::to_string(i) + "]";
    if (n[i].IsScalar()) {
      auto parsed = nlohmann::json::parse(n[i].Scalar(), nullptr, false);
      if (parsed.is_discarded() || !parsed.is_object())
        bad(item, n[i], "a pattern: a mapping, or a JSON object as Lambda writes it");
      patterns.push_back(std::move(parsed));
    } else {
      patterns.push_back(as_json(n[i], item));
    }
  }
  return patterns;
}

// ------------------------------------------------------------------ the option table

using std::chrono::milliseconds;
using std::chrono::seconds;
using Option = config::Option<PipelineConfig>;

// The keys of the process, not of one pipeline (one metrics server, one log level).
bool is_process_key(const std::string& key) {
  return key.starts_with("metrics.") || key.starts_with("admin.") || key.starts_with("tracing.") ||
         key == "logging.level";
}

// The registered drivers of each kind: sources (source.type) and sinks (sink.type).
template <class Driver>
const std::vector<const Driver*>& drivers_of();
template <>
const std::vector<const driver::SourceDriver*>& drivers_of<driver::SourceDriver>() {
  return driver::registered_drivers();
}
template <>
const std::vector<const sinks::SinkDriver*>& drivers_of<sinks::SinkDriver>() {
  return sinks::registered_sink_drivers();
}

template <class Driver>
std::vector<std::string> driver_names() {
  std::vector<std::string> names;
  for (const auto* d : drivers_of<Driver>()) names.emplace_back(d->name());
  return names;
}

template <class Driver>
std::string driver_list() {
  std::string list;
  for (const auto& name : driver_names<Driver>()) list += (list.empty() ? "" : " | ") + name;
  return list;
}
using driver::SourceDriver;
using sinks::SinkDriver;

const std::vector<Option>& options() {
  static const std::vector<Option> table = {
      {"pipelines", "mapping", "",
       "Several pipelines in one process: each pipeline's name -> its keys (source, decode, "
       "normalize, identity, filter, sink, dead_letter, logging.fields). The other top-level "
       "keys are every pipeline's defaults (its own mappings merge over them); metrics, admin "
       "and logging.level are the process's (one metrics server, a pipeline label on every "
       "series). Each pipeline has its own container, permits and writers; no two write one "
       "SQLite file. Environment variables of a pipeline's keys are refused (they would set "
       "every pipeline's).",
       nullptr},
      {"name", "string", "default",
       "The pipeline's name: in /pipelines/NAME and sluice ctl (letters, digits, . _ -).",
       [](auto& c, auto& n, auto& k) {
         c.name = as_string(n, k);
         if (c.name.empty() || c.name.size() > 64 ||
             c.name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                      "0123456789._-") != std::string::npos)
           bad(k, n, "1 to 64 letters, digits, '.', '_' or '-'");
       }},
      {"filter", "list of patterns", "",
       "Lambda's event-filtering patterns (docs/filtering.md), ORed: body fields under body, "
       "SQS message attributes under attributes, RabbitMQ headers under headers; exact values, "
       "prefix, suffix, equals-ignore-case, anything-but, numeric, exists, $or. A message no "
       "pattern matches is acked without being written (sluice_filtered_total); a malformed one "
       "is still rejected. Empty: every message is stored.",
       [](auto& c, auto& n, auto& k) { c.transform.filter = as_filter(n, k); }},
      // --- source
      {"source.type", "enum: " + driver_list<SourceDriver>(), driver_names<SourceDriver>().front(),
       "Where messages come from; each source has its own keys under source.<type> (the "
       "sections below). The other source.* keys are the container's, for every source.",
       [](auto& c, auto& n, auto& k) {
         c.source_type = as_enum(n, k, driver_names<SourceDriver>());
       },
       "SLUICE_SOURCE_TYPE"},
      {"source.max_messages_per_second", "number", "0",
       "At most this many messages received a second by this pipeline in this process (a "
       "token bucket of one receive's worth: over any window T at most rate x T + one "
       "receive); several instances each take this many. 0: no limit. Protects the database "
       "from a backlog drained at full speed.",
       [](auto& c, auto& n, auto& k) {
         if (!n.IsScalar()) bad(k, n, "a number of messages a second, 0 for no limit");
         double rate = 0;
         const std::string& text = n.Scalar();
         const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), rate);
         if (ec != std::errc() || end != text.data() + text.size() || !(rate >= 0) || rate > 1e6 ||
             (rate > 0 && rate < 0.001))
           bad(k, n, "0 (no limit), or from 0.001 to 1000000 messages a second");
         c.container.max_messages_per_second = rate;
       },
       "SLUICE_MAX_MESSAGES_PER_SECOND"},
      {"source.wait_for_queue", "boolean", "false",
       "A queue that does not exist at start: wait for it to be created (logging) instead of "
       "exiting with code 2 (Spring's missingQueuesFatal, inverted).",
       [](auto& c, auto& n, auto& k) { c.wait_for_queue = as_bool(n, k); }},
      {"source.max_in_flight", "integer", "100",
       "Messages held at once (received, not yet settled; Spring Cloud AWS calls it "
       "maxConcurrentMessages). Bounds memory.",
       [](auto& c, auto& n, auto& k) {
         c.container.max_in_flight = static_cast<int>(as_int(n, k, 1, 100000));
       }},
      {"source.concurrency", "string", "",
       "N or MIN-MAX (Spring's syntax), elastic between MIN and MAX: concurrent receives (SQS), "
       "consumers (RabbitMQ). auto: SQS receives found by measuring (doubled while throughput "
       "rises, settled where it plateaus, fewer when the sink is the bottleneck or receives "
       "come back partial, one when idle); RabbitMQ consumers elastic from 1 to max_in_flight / "
       "prefetch (at most 64). Default: auto for SQS (on a full standard queue as fast as 1-4 "
       "with the same requests; on a FIFO queue fewer requests and a faster drain: "
       "BENCHMARKS.md), unless one of the fixed range's triggers below is set; 1-4 for the "
       "other sources.",
       [](auto& c, auto& n, auto& k) {
         c.concurrency_set = true;
         try {
           parse_concurrency(as_string(n, k), c.container);
         } catch (const std::invalid_argument&) {
           bad(k, n, "N or MIN-MAX with 1 <= MIN <= MAX, e.g. 2-8, or auto");
         }
       }},
      {"source.consecutive_full_trigger", "integer", "3",
       "A receive loop that comes back full this many times in a row starts another (up to "
       "MAX). For a MIN-MAX range (auto has its own rule): set without source.concurrency, "
       "an SQS source keeps 1-4.",
       [](auto& c, auto& n, auto& k) {
         c.container.consecutive_full_trigger = static_cast<int>(as_int(n, k, 1, 1000));
         c.receive_scaler_set = true;
       }},
      {"source.consecutive_empty_trigger", "integer", "3",
       "A receive loop that comes back empty this many times in a row stops (down to MIN). "
       "For a MIN-MAX range, as consecutive_full_trigger.",
       [](auto& c, auto& n, auto& k) {
         c.container.consecutive_empty_trigger = static_cast<int>(as_int(n, k, 1, 1000));
         c.receive_scaler_set = true;
       }},
      {"source.start_receive_min_interval", "duration", "500ms",
       "At least this long between two receive loops started. For a MIN-MAX range, as "
       "consecutive_full_trigger.",
       [](auto& c, auto& n, auto& k) {
         c.container.start_receive_min_interval = as_duration(n, k, milliseconds(0), seconds(3600));
         c.receive_scaler_set = true;
       }},
      {"source.stop_receive_min_interval", "duration", "5s",
       "At least this long between two receive loops stopped. For a MIN-MAX range, as "
       "consecutive_full_trigger.",
       [](auto& c, auto& n, auto& k) {
         c.container.stop_receive_min_interval = as_duration(n, k, milliseconds(0), seconds(3600));
         c.receive_scaler_set = true;
       }},
      {"source.receive_error_backoff_max", "duration", "30s",
       "A failing receive (queue missing, endpoint down) is tried again after 200ms, doubling up "
       "to this.",
       [](auto& c, auto& n, auto& k) {
         c.container.error_backoff_max = as_duration(n, k, milliseconds(1), seconds(3600));
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
       "On SIGTERM: how long the whole stop may take, exit included (1s to 1h). Running "
       "work, the final flush, the source's shutdown and the writers get all of it but a "
       "fifth (400 ms to 2 s); then database calls are interrupted, and at the deadline "
       "the process exits anyway (code 5; what was not acked is delivered again).",
       [](auto& c, auto& n, auto& k) {
         c.container.shutdown_deadline = as_duration(n, k, seconds(1), seconds(3600));
       }},
      // --- decode
      {"decode.max_body_bytes", "integer", "262144",
       "Larger bodies are rejected as malformed. With source.sqs.large_payloads.enabled the "
       "default is source.sqs.large_payloads.max_bytes_in_flight (at most 1 GiB).",
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
       "The stable document: one entry per field, in order (see the field table). With "
       "normalize.when, the fields every version has (they come first).",
       nullptr},
      {"normalize.when", "mapping", "",
       "Versions of the payload: `from` (a JSON pointer, or a list: the first present wins) "
       "names the discriminator, e.g. /schemaVersion; `cases` maps each of its values (2 and "
       "\"2\" are the same) to that version's own list of fields; `absent` names the case of a "
       "body without it. Each list is checked at load against identity.versions; a value not in "
       "cases is schema drift, its value in the reason.",
       nullptr},
      // --- identity
      {"identity.version", "string", "V1",
       "The hash version in force: the entry of identity.versions whose fields identify a "
       "record.",
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
      {"identity.key", "content | deduplication_id | {attribute: NAME} | {header: NAME}", "content",
       "What makes two messages one record. content: the identity.versions fields' values "
       "(a producer's retry with the same values is stored once). {attribute: NAME} (SQS) or "
       "{header: NAME} (RabbitMQ): the producer's own id, hashed with identity.version. "
       "deduplication_id: an SQS FIFO queue's MessageDeduplicationId. A message without the "
       "key is rejected (validation), never stored under its content instead.",
       [](auto& c, auto& n, auto& k) {
         using Key = pipeline::TransformSpec::Key;
         if (n.IsMap() && n.size() == 1) {
           const std::string kind = n.begin()->first.Scalar();
           if (kind != "attribute" && kind != "header")
             bad(k, n, "{attribute: NAME} or {header: NAME}");
           c.transform.key = Key::header;
           c.transform.key_header_key = kind;
           c.transform.key_header = as_string(n.begin()->second, k + "." + kind);
           if (c.transform.key_header.empty()) bad(k + "." + kind, n.begin()->second, "a name");
           return;
         }
         if (!n.IsScalar())
           bad(k, n, "content, deduplication_id, {attribute: NAME} or {header: NAME}");
         const std::string kind = as_enum(n, k, {"content", "deduplication_id"});
         c.transform.key = kind == "content" ? Key::content : Key::deduplication_id;
       }},
      {"identity.field", "string", "documentHash",
       "Document field (and unique index) holding the hash.",
       [](auto& c, auto& n, auto& k) { c.transform.hash_field = as_string(n, k); }},
      // --- route
      {"route.field", "string", "",
       "Route records to tables by this normalized field's value (one of the identity's "
       "fields, with identity.key: content: the unique index is per table). Empty: every "
       "record goes to sink.table.",
       [](auto& c, auto& n, auto& k) { c.transform.route_field = as_string(n, k); }},
      {"route.tables", "map", "",
       "route.field's value -> the table (PostgreSQL, SQLite) or collection (MongoDB) for it, "
       "e.g. {OrderPlaced: orders_placed}; each is created at start like sink.table. A key "
       "is matched against the field's normalized value: text exactly (after the field's "
       "case and trim), a number field by its value (7, 7.0 and \"7.00\" are one), a boolean "
       "as true or false.",
       [](auto& c, auto& n, auto& k) {
         if (!n.IsMap() || n.size() == 0) bad(k, n, "a mapping of value to table, e.g. {A: t_a}");
         c.transform.route_tables.clear();
         for (const auto& entry : n) {
           const std::string value = as_string(entry.first, k);
           const std::string table = as_string(entry.second, k + "." + value);
           if (table.empty() || table.size() > 53 || table.find('\0') != std::string::npos ||
               table.find('$') != std::string::npos || lowered(table).starts_with("sqlite_"))
             bad(k + "." + value, entry.second,
                 "a table name of 1 to 53 bytes, without '$' and not starting with sqlite_ "
                 "(its index uniq_NAME_hash must fit PostgreSQL's 63 bytes; MongoDB refuses '$'; "
                 "SQLite keeps sqlite_ for itself)");
           c.transform.route_tables.emplace_back(value, table);
         }
       }},
      {"route.unknown", "enum: default | reject", "default",
       "A record whose route.field value route.tables does not name (or has no value): "
       "default: written to sink.table; reject: rejected (validation) with the value.",
       [](auto& c, auto& n, auto& k) {
         c.transform.route_unknown_rejected = as_enum(n, k, {"default", "reject"}) == "reject";
       }},
      // --- sink
      {"sink.type", "enum: " + driver_list<SinkDriver>(), driver_names<SinkDriver>().front(),
       "Where records are written; each sink has its own keys under sink.<type> (the sections "
       "below). The other sink.* keys are the writers', for every sink.",
       [](auto& c, auto& n, auto& k) { c.sink_type = as_enum(n, k, driver_names<SinkDriver>()); },
       "SLUICE_SINK_TYPE"},
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
       "A record the database fails on its own this many deliveries in a row is rejected "
       "(sink_refused) instead of coming back again: a MongoDB write error whose code is not "
       "known to be permanent, a write concern not met, or (SQLite, PostgreSQL) a record that "
       "fails while other records are written. A batch failing again with a record delivered "
       "before in it is written in halves, once each, down to the record that fails while its "
       "batch-mates are written (both halves failing is an outage: all are returned); not for "
       "ordered groups.",
       [](auto& c, auto& n, auto& k) {
         c.max_record_failures_set = true;
         c.writer.max_record_failures = static_cast<int>(as_int(n, k, 1, 1000));
       }},
      {"sink.table", "string", "records",
       "Table (SQLite, PostgreSQL) or collection (MongoDB) for records.",
       [](auto& c, auto& n, auto& k) { c.sink_table = as_string(n, k); }},
      {"sink.rejects_table", "string", "rejects", "Table or collection for rejected messages.",
       [](auto& c, auto& n, auto& k) { c.sink_rejects_table = as_string(n, k); }},
      // --- dead letters
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
      {"admin.enabled", "boolean", "false",
       "Pause, resume and status on the metrics server: POST /pipelines/NAME/pause and "
       "/resume, GET /pipelines (sluice ctl). With SLUICE_ADMIN_TOKEN set, every admin request "
       "needs Authorization: Bearer TOKEN; a metrics.listen that is not loopback requires it.",
       [](auto& c, auto& n, auto& k) { c.admin_enabled = as_bool(n, k); }},
      // --- traces (the process's: one exporter for every pipeline)
      {"tracing.otlp_endpoint", "string", "",
       "An OpenTelemetry collector's OTLP/HTTP base URL (http://HOST:4318): spans go to its "
       "/v1/traces, protobuf-encoded, in batches, from a thread of their own; when it is slow "
       "or down they are dropped and counted (sluice_trace_spans_dropped_total), never waited "
       "for. Empty: no tracing (docs/tracing.md).",
       [](auto& c, auto& n, auto& k) {
         c.tracer.otlp_endpoint = n.IsNull() ? "" : as_string(n, k);
         try {
           tracing::validate(c.tracer);
         } catch (const std::invalid_argument& e) {
           // The URL may carry a password: never shown.
           throw ConfigError(k + ": got '" + common::redact_password(c.tracer.otlp_endpoint) +
                             "', expected a collector's http:// or https:// base URL (" + e.what() +
                             ")");
         }
       },
       "OTEL_EXPORTER_OTLP_ENDPOINT"},
      {"tracing.sampling_ratio", "number", "1",
       "The share of traces Sluice starts that are recorded (0 to 1). A message whose producer "
       "sent a trace context follows the producer's decision instead (parent-based sampling).",
       [](auto& c, auto& n, auto& k) {
         double ratio = -1;
         const std::string text = n.IsScalar() ? n.Scalar() : "";
         const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), ratio);
         if (text.empty() || ec != std::errc() || end != text.data() + text.size() ||
             !(ratio >= 0 && ratio <= 1))
           bad(k, n, "a number from 0 to 1");
         c.tracer.sampling_ratio = ratio;
       },
       "SLUICE_TRACING_SAMPLING_RATIO"},
      {"tracing.producer_as_parent", "boolean", "true",
       "A message's process span is a child of its producer's span (one trace from the "
       "request that sent it to the row written). false: it starts a trace of its own, linked "
       "to the producer's.",
       [](auto& c, auto& n, auto& k) { c.tracer.producer_as_parent = as_bool(n, k); }},
      {"tracing.service_name", "string", "sluice", "The service.name of Sluice's spans.",
       [](auto& c, auto& n, auto& k) {
         c.tracer.service_name = as_string(n, k);
         if (c.tracer.service_name.empty()) bad(k, n, "a name");
       },
       "OTEL_SERVICE_NAME"},
      {"tracing.max_queue_spans", "integer", "8192",
       "Spans waiting for export at most; beyond, new ones are dropped and counted.",
       [](auto& c, auto& n, auto& k) {
         c.tracer.max_queue_spans = static_cast<std::size_t>(as_int(n, k, 1, 10'000'000));
       }},
      {"autoscale.period", "duration", "1m",
       "The in-flight scaling signal's averaging period (exported as sluice_autoscale_* and "
       "GET /autoscale).",
       [](auto& c, auto& n, auto& k) {
         c.autoscale.period = as_duration(n, k, milliseconds(1000), seconds(3600));
       }},
      {"autoscale.periods", "integer", "5", "Periods whose largest average counts.",
       [](auto& c, auto& n, auto& k) {
         c.autoscale.periods = static_cast<int>(as_int(n, k, 1, 1000));
       }},
      {"autoscale.spare", "integer", "1", "Idle tasks kept ready (1 or 2 is usual).",
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
      {"name", "string",
       "Name in the normalized document (required). Dots nest: customer.id is stored as "
       "{\"customer\": {\"id\": ...}}.",
       [](auto& f, auto& n, auto& k) { f.name = as_string(n, k); }},
      {"from", "JSON pointer, or a list of them",
       "Where the value is in the body, e.g. /item/sku; a list: the first one present (and not "
       "null) wins, e.g. [/customer/id, /customerId].",
       [](auto& f, auto& n, auto& k) {
         f.from = n.IsSequence() ? as_string_list(n, k) : std::vector{as_string(n, k)};
         if (f.from.empty()) bad(k, n, "a JSON pointer or a non-empty list of them");
       }},
      {"type",
       "enum: string | integer | number | boolean | json | timestamp | decimal | uuid | enum",
       "Type to convert to (\"42\" becomes 42 for integer); a value that does not convert is "
       "schema drift. timestamp: RFC 3339 with any offset, or an epoch count (see unit), stored "
       "in UTC (see precision, output); decimal: exact, stored as canonical text (\"1.10\", "
       "1.1 and \"1.100\" are all \"1.1\"; see scale), never a binary float; uuid: stored "
       "lowercase 8-4-4-4-12 (braces, urn:uuid: and 32 bare digits accepted); enum: a string "
       "among values.",
       [](auto& f, auto& n, auto& k) {
         static const std::pair<const char*, pipeline::FieldType> types[] = {
             {"string", pipeline::FieldType::string},
             {"integer", pipeline::FieldType::integer},
             {"number", pipeline::FieldType::number},
             {"boolean", pipeline::FieldType::boolean},
             {"json", pipeline::FieldType::json},
             {"timestamp", pipeline::FieldType::timestamp},
             {"decimal", pipeline::FieldType::decimal},
             {"uuid", pipeline::FieldType::uuid},
             {"enum", pipeline::FieldType::enumeration}};
         std::vector<std::string> allowed;
         for (const auto& [name, type] : types) allowed.emplace_back(name);
         const std::string t = as_enum(n, k, allowed);
         for (const auto& [name, type] : types)
           if (t == name) f.type = type;
       }},
      {"required", "boolean", "Missing (or null) is a validation reject. Default false.",
       [](auto& f, auto& n, auto& k) { f.required = as_bool(n, k); }},
      {"default", "scalar",
       "Value used when the field is absent and not required. For timestamp, decimal, uuid, enum "
       "and a field with text transforms it is converted and checked at load like a message's "
       "value; the other types keep it as written.",
       [](auto& f, auto& n, auto& k) { f.default_value = as_json_scalar(n, k); }},
      {"const", "scalar", "A constant value instead of `from` (converted like `default`).",
       [](auto& f, auto& n, auto& k) { f.constant = as_json_scalar(n, k); }},
      {"attribute", "string",
       "An SQS message attribute of this name instead of `from` (its String or Number value; "
       "a Binary one base64), e.g. tenant. For source.type sqs.",
       [](auto& f, auto& n, auto& k) {
         f.header = as_string(n, k);
         f.header_key = "attribute";
       }},
      {"header", "string",
       "An AMQP message header of this name instead of `from`. For source.type rabbitmq.",
       [](auto& f, auto& n, auto& k) {
         f.header = as_string(n, k);
         f.header_key = "header";
       }},
      {"unit", "enum: auto | seconds | milliseconds | microseconds",
       "timestamp: the unit of an epoch count (a number, or a string of digits). auto (the "
       "default): seconds below 100,000,000,000 (the year 5138), milliseconds from there.",
       [](auto& f, auto& n, auto& k) {
         const std::string u = as_enum(n, k, {"auto", "seconds", "milliseconds", "microseconds"});
         f.timestamp.unit = u == "seconds"        ? pipeline::EpochUnit::seconds
                            : u == "milliseconds" ? pipeline::EpochUnit::milliseconds
                            : u == "microseconds" ? pipeline::EpochUnit::microseconds
                                                  : pipeline::EpochUnit::auto_detect;
       }},
      {"precision", "enum: seconds | milliseconds | microseconds",
       "timestamp: the precision kept; finer digits are cut (toward the past). Default "
       "milliseconds.",
       [](auto& f, auto& n, auto& k) {
         const std::string u = as_enum(n, k, {"seconds", "milliseconds", "microseconds"});
         f.timestamp.precision = u == "seconds"        ? pipeline::TimePrecision::seconds
                                 : u == "microseconds" ? pipeline::TimePrecision::microseconds
                                                       : pipeline::TimePrecision::milliseconds;
       }},
      {"output", "enum: rfc3339 | epoch_ms",
       "timestamp: stored as RFC 3339 text in UTC (2024-02-29T18:14:59.123Z, the default) or as "
       "an integer of epoch milliseconds. A PostgreSQL column of it is timestamptz either way.",
       [](auto& f, auto& n, auto& k) {
         f.timestamp.output = as_enum(n, k, {"rfc3339", "epoch_ms"}) == "epoch_ms"
                                  ? pipeline::TimeOutput::epoch_ms
                                  : pipeline::TimeOutput::rfc3339;
       }},
      {"format", "string",
       "timestamp: a strftime-style format for text that is not RFC 3339, e.g. \"%d/%m/%Y "
       "%H:%M:%S\" (%z reads an offset such as +0545; without one the text is read as UTC).",
       [](auto& f, auto& n, auto& k) {
         f.timestamp.format = as_string(n, k);
         if (f.timestamp.format.find('%') == std::string::npos)
           bad(k, n, "a format with at least one %-field, such as %Y-%m-%d %H:%M:%S");
       }},
      {"scale", "integer",
       "decimal: exactly this many digits after the point (12.5 is stored \"12.50\" with "
       "scale 2); a value with more significant digits after the point is schema drift, never "
       "rounded. Without it trailing zeros are trimmed.",
       [](auto& f, auto& n, auto& k) { f.scale = static_cast<int>(as_int(n, k, 0, 1000)); }},
      {"values", "list of strings",
       "enum: the allowed values (compared after the text transforms); any other is a "
       "validation reject.",
       [](auto& f, auto& n, auto& k) { f.values = as_string_list(n, k); }},
      {"text", "list of: trim | lower | upper | nfc | collapse",
       "string, enum: canonical text before hashing, applied as NFC (Unicode composition), "
       "trim (leading and trailing whitespace), collapse (inner whitespace runs to one space), "
       "then lower or upper, whatever the order listed. They change the hash of records that "
       "had other spellings: adding one is a new identity version.",
       [](auto& f, auto& n, auto& k) {
         f.text = {};
         for (const auto& t : as_string_list(n, k)) {
           const std::string item =
               as_enum(YAML::Node(t), k + "[]", {"trim", "lower", "upper", "nfc", "collapse"});
           if (item == "trim") f.text.trim = true;
           if (item == "nfc") f.text.nfc = true;
           if (item == "collapse") f.text.collapse = true;
           if (item == "lower" || item == "upper") {
             const auto wanted =
                 item == "lower" ? pipeline::LetterCase::lower : pipeline::LetterCase::upper;
             if (f.text.letter_case != pipeline::LetterCase::keep && f.text.letter_case != wanted)
               bad(k, n, "at most one of lower and upper");
             f.text.letter_case = wanted;
           }
         }
       }},
      {"min", "number",
       "integer, number, decimal: the least value allowed (inclusive); below it is a "
       "validation reject. Compared exactly.",
       [](auto& f, auto& n, auto& k) { f.min = as_decimal_text(n, k); }},
      {"max", "number", "integer, number, decimal: the greatest value allowed (inclusive).",
       [](auto& f, auto& n, auto& k) { f.max = as_decimal_text(n, k); }},
      {"min_length", "integer",
       "string, enum: the fewest characters (Unicode code points) allowed, after the text "
       "transforms; fewer is a validation reject.",
       [](auto& f, auto& n, auto& k) {
         f.min_length = static_cast<std::size_t>(as_int(n, k, 0, 1'000'000'000));
       }},
      {"max_length", "integer", "string, enum: the most characters allowed.",
       [](auto& f, auto& n, auto& k) {
         f.max_length = static_cast<std::size_t>(as_int(n, k, 0, 1'000'000'000));
       }},
      {"pattern", "string",
       "string, enum, uuid: a regular expression (RE2 syntax: linear time, no backreferences) "
       "the whole value must match, after the text transforms; else a validation reject.",
       [](auto& f, auto& n, auto& k) { f.pattern = as_string(n, k); }},
      {"meta",
       "enum: message_id | sent_time | received_time | receive_count | source | group_id | "
       "sequence_number | trace_id | sns_message_id | sns_topic_arn | sns_timestamp | "
       "sns_subject | sns_signature | sns_signature_version | sns_signing_cert_url",
       "A message property instead of `from`. group_id and sequence_number are a FIFO message's "
       "MessageGroupId and SequenceNumber (a decimal string; null when the queue does not send "
       "them). trace_id is the trace of the message's processing (32 hex digits: its producer's "
       "trace when it carried one, unless tracing.producer_as_parent is false; null when "
       "tracing is off). sns_* are the SNS envelope's "
       "MessageId, TopicArn, Timestamp, Subject, Signature, "
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
             {"trace_id", pipeline::MetaField::trace_id},
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
// that can set it, and a secret's value is never repeated. `full_key` is the row's
// key as the file writes it (source.sqs.queue_url for a driver's queue_url).
template <class Target>
void apply_option(const config::Option<Target>& o, const std::string& full_key, Target& target,
                  const YAML::Node& node, const std::string& key) {
  try {
    o.apply(target, node, key);
  } catch (const ConfigError& e) {
    std::string what = o.secret && !dynamic_cast<const RedactedConfigError*>(&e)
                           ? key + ": expected " + o.type + " (the value is secret: not shown)"
                           : e.what();
    if (!o.env.empty() && what.find(o.env) == std::string::npos)
      what += " [key " + full_key + ", environment variable " + o.env + "]";
    throw ConfigError(what);
  }
}

const Option* find_option(const std::string& key) {
  for (const auto& o : options())
    if (o.key == key) return &o;
  return nullptr;
}

template <class Driver>
std::string section_of(const Driver& d) {
  return std::string(Driver::kSection) + "." + std::string(d.name());
}

// A driver's own key: its row and the driver.
template <class Driver>
struct DriverKey {
  const Driver* driver = nullptr;
  const config::Option<typename Driver::SettingsBase>* option = nullptr;
};
template <class Driver>
DriverKey<Driver> find_driver_option(const std::string& key) {
  for (const auto* d : drivers_of<Driver>()) {
    const std::string prefix = section_of(*d) + ".";
    if (!key.starts_with(prefix)) continue;
    for (const auto& o : d->options())
      if (key.compare(prefix.size(), std::string::npos, o.key) == 0) return {d, &o};
  }
  return {};
}
bool is_driver_key(const std::string& key) {
  return find_driver_option<SourceDriver>(key).option || find_driver_option<SinkDriver>(key).option;
}

// A key of an earlier release (source.queue_url): its new name (source.sqs.queue_url).
template <class Driver>
std::optional<std::string> renamed_in(const std::string& key) {
  for (const auto* d : drivers_of<Driver>())
    for (const auto& [old_key, own_key] : d->renamed_keys())
      if (old_key == key) return section_of(*d) + "." + own_key;
  return std::nullopt;
}
std::optional<std::string> renamed(const std::string& key) {
  if (auto now = renamed_in<SourceDriver>(key)) return now;
  return renamed_in<SinkDriver>(key);
}

// Every key of the drivers of one kind, with or without the earlier names.
template <class Driver>
void add_driver_keys(std::vector<std::string>& keys, bool with_old_names) {
  for (const auto* d : drivers_of<Driver>()) {
    for (const auto& o : d->options()) keys.push_back(section_of(*d) + "." + o.key);
    if (with_old_names)
      for (const auto& [old_key, own_key] : d->renamed_keys()) keys.push_back(old_key);
  }
}

// Every key, of the pipeline's table and of every driver's, with or without the earlier
// names, for "did you mean" suggestions and for sections.
std::vector<std::string> full_keys(bool with_old_names) {
  std::vector<std::string> keys;
  for (const auto& o : options()) keys.push_back(o.key);
  add_driver_keys<SourceDriver>(keys, with_old_names);
  add_driver_keys<SinkDriver>(keys, with_old_names);
  return keys;
}

bool is_section(const std::string& key) {
  for (const auto& k : full_keys(true))
    if (k.rfind(key + ".", 0) == 0) return true;
  return false;
}

// Every option and every section above one (not the earlier names), for suggestions.
std::vector<std::string> all_keys() {
  std::set<std::string> keys;
  for (const auto& k : full_keys(false)) {
    keys.insert(k);
    for (auto dot = k.find('.'); dot != std::string::npos; dot = k.find('.', dot + 1))
      keys.insert(k.substr(0, dot));
  }
  return {keys.begin(), keys.end()};
}

// Every driver's section of one kind, since source.type or sink.type may come after
// them (or from the environment), with its defaults applied.
template <class Driver>
struct Sections {
  std::map<std::string, std::unique_ptr<typename Driver::SettingsBase>, std::less<>> settings;
  std::map<std::string, std::string, std::less<>> written;  // driver -> the first key given

  Sections() {
    for (const auto* d : drivers_of<Driver>()) {
      auto made = d->make_settings();
      for (const auto& o : d->options())
        if (!o.default_value.empty())
          o.apply(*made, YAML::Load(o.default_value), o.key + " (default)");
      settings.emplace(std::string(d->name()), std::move(made));
    }
  }
  // Applies a key of one of its drivers; false when none has it.
  bool apply(const std::string& key, const std::string& written_as, const YAML::Node& value);
  // The chosen driver's settings. Keys given of another driver are refused, not ignored:
  // `type_key` names the choice, `type_env` the variable that may have made it.
  std::unique_ptr<typename Driver::SettingsBase> take(const std::string& chosen,
                                                      const std::string& type_key,
                                                      const std::string& type_env);
};

template <class Driver>
bool Sections<Driver>::apply(const std::string& key, const std::string& written_as,
                             const YAML::Node& value) {
  const auto own = find_driver_option<Driver>(key);
  if (!own.option) return false;
  const std::string name(own.driver->name());
  written.try_emplace(name, written_as);
  apply_option(*own.option, key, *settings.at(name), value,
               key == written_as ? key : key + " (written " + written_as + ")");
  return true;
}

template <class Driver>
std::unique_ptr<typename Driver::SettingsBase> Sections<Driver>::take(const std::string& chosen,
                                                                      const std::string& type_key,
                                                                      const std::string& type_env) {
  const char* from_environment = std::getenv(type_env.c_str());
  const std::string origin =
      from_environment && *from_environment ? " (from " + type_env + ")" : "";
  const std::string kind(Driver::kSection);
  for (const auto& [name, key] : written)
    if (name != chosen)
      throw ConfigError(key + ": set, but " + type_key + " is " + chosen + origin + " (keys of a " +
                        kind + " that is not chosen are refused: remove them, or set " +
                        (origin.empty() ? type_key + ": " + name : type_env + "=" + name) + ")");
  return std::move(settings.find(chosen)->second);
}

// What the loader holds until finalize.
struct Loading {
  PipelineConfig config;
  Sections<SourceDriver> sources;
  Sections<SinkDriver> sinks;
  std::map<std::string, std::string> renamed_from;  // new key -> the old name it was given as
  std::set<std::string> given_as_new;               // new keys given under their new name
};

std::vector<pipeline::FieldSpec> parse_fields(const YAML::Node& list, const std::string& key) {
  if (!list.IsSequence()) bad(key, list, "a list of fields");
  std::vector<pipeline::FieldSpec> fields;
  std::vector<std::string> known;
  for (const auto& o : field_options()) known.push_back(o.key);
  for (std::size_t i = 0; i < list.size(); ++i) {
    const YAML::Node item = list[i];
    const std::string item_key = key + "[" + std::to_string(i) + "]";
    if (!item.IsMap())
      bad(item_key, item, "a mapping with name and from, const, meta, attribute or header");
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
    fields.push_back(std::move(field));
  }
  return fields;
}

// normalize.when: {from: /schemaVersion, cases: {"1": [fields], "2": [fields]}, absent: "1"}
pipeline::PayloadVersions parse_versions(const YAML::Node& node, const std::string& key) {
  if (!node.IsMap()) bad(key, node, "a mapping with from, cases and (optionally) absent");
  pipeline::PayloadVersions versions;
  for (const auto& entry : node) {
    const std::string name = entry.first.Scalar();
    const std::string item_key = key + "." + name;
    if (name == "from") {
      versions.from = entry.second.IsSequence() ? as_string_list(entry.second, item_key)
                                                : std::vector{as_string(entry.second, item_key)};
    } else if (name == "cases") {
      if (!entry.second.IsMap() || entry.second.size() == 0)
        bad(item_key, entry.second, "a mapping of each version's value to its list of fields");
      for (const auto& version : entry.second) {
        const std::string value = as_string(version.first, item_key);
        versions.cases.emplace_back(value, parse_fields(version.second, item_key + "." + value));
      }
    } else if (name == "absent") {
      versions.absent = as_string(entry.second, item_key);
    } else {
      unknown_key(item_key, {key + ".from", key + ".cases", key + ".absent"});
    }
  }
  if (versions.from.empty()) bad(key + ".from", YAML::Node(), "the discriminator's JSON pointer");
  if (versions.cases.empty()) bad(key + ".cases", YAML::Node(), "the versions' field lists");
  return versions;
}

void walk(Loading& loading, const YAML::Node& node, const std::string& prefix) {
  auto& config = loading.config;
  for (const auto& entry : node) {
    const std::string written =
        prefix.empty() ? entry.first.Scalar() : prefix + "." + entry.first.Scalar();
    std::string key = written;
    if (find_option(key) == nullptr && !is_driver_key(key)) {
      if (auto now = renamed(key)) {
        config.warnings.push_back(key + " is now " + *now +
                                  " (read under its new name; the old name will be refused in "
                                  "the next release)");
        key = *now;
        loading.renamed_from[key] = written;
      }
    } else if (is_driver_key(key)) {
      loading.given_as_new.insert(key);
    }
    // One value from one place: an old name beside its new one is a mistake, not a merge.
    if (const auto old = loading.renamed_from.find(key);
        old != loading.renamed_from.end() && loading.given_as_new.count(key))
      throw ConfigError(key + ": given twice, also as " + old->second +
                        " (its name in earlier releases): keep " + key + " only");
    if (key == "pipelines") {
      throw ConfigError(
          "pipelines: several pipelines are read by `sluice run` and `sluice "
          "config check` (load_pipelines), not as one pipeline");
    } else if (key == "normalize.fields") {
      config.transform.fields = parse_fields(entry.second, key);
    } else if (key == "normalize.when") {
      config.transform.versions = parse_versions(entry.second, key);
    } else if (const Option* option = find_option(key)) {
      apply_option(*option, key, config, entry.second, key);
    } else if (loading.sources.apply(key, written, entry.second) ||
               loading.sinks.apply(key, written, entry.second)) {
      // a source's or a sink's own key: kept in its driver's section until finalize
    } else if (is_section(key)) {
      if (!entry.second.IsMap()) bad(key, entry.second, "a mapping");
      walk(loading, entry.second, key);
    } else {
      unknown_key(key, all_keys());
    }
  }
}

// normalize.fields[].meta names that only some sources have.
const std::pair<pipeline::MetaField, const char*> kSourceMeta[] = {
    {pipeline::MetaField::sent_time, "sent_time"},
    {pipeline::MetaField::group_id, "group_id"},
    {pipeline::MetaField::sequence_number, "sequence_number"}};

void finalize(Loading& loading) {
  auto& c = loading.config;
  c.source_driver = driver::find_driver(c.source_type);
  const auto& source = *c.source_driver;
  auto settings = loading.sources.take(c.source_type, "source.type", "SLUICE_SOURCE_TYPE");
  driver::PipelineSettings pipeline_settings{
      c.container,
      c.transform.max_body_bytes,
      c.max_body_bytes_set,
      c.writer.max_record_failures,
      c.max_record_failures_set,
      c.concurrency_set,
      c.receive_scaler_set,
      c.transform.key == pipeline::TransformSpec::Key::deduplication_id};
  source.finalize(*settings, pipeline_settings);
  c.source = std::move(settings);
  c.container.name = c.name;               // the container's log lines name their pipeline
  c.container.ack_mode = AckMode::manual;  // the sink writer settles each message
  // The stages are quick and never block (the writers do the I/O), so a received
  // batch is handled in one worker call: one thread hand-off per poll, not per message.
  c.container.listener_mode = ListenerMode::batch;
  // The writers keep each ordered group's order (one writer at a time per group, in the
  // order handed over, none written after one of its group that failed): a FIFO group
  // goes out a run at a time, not a message per write.
  c.container.ordered_group_runs = true;
  c.writer.dead_letter_queue = source.dead_letters(*c.source);
  // The container's checks speak of its own option names: say the YAML keys instead.
  try {
    validate(c.container);
  } catch (const OptionError& e) {
    throw_as_config_error(e, "source.",
                          {{"failure_backoff_base", "source.failure_backoff"},
                           {"error_backoff_max", "source.receive_error_backoff_max"},
                           {"min_concurrent_receives", "source.concurrency (MIN)"},
                           {"max_concurrent_receives", "source.concurrency (MAX)"}});
  }
  const std::string header_key(source.header_key());
  const auto offered = source.meta_fields();
  c.transform.filter_headers = header_key.empty() ? "" : header_key + "s";
  using IdentityKey = pipeline::TransformSpec::Key;
  if (c.transform.key == IdentityKey::header && c.transform.key_header_key != header_key)
    throw ConfigError("identity.key." + c.transform.key_header_key + ": the " + c.source_type +
                      " source's messages have " +
                      (header_key.empty() ? std::string("no attributes or headers")
                                          : header_key + "s: write {" + header_key + ": " +
                                                c.transform.key_header + "}"));
  if (c.transform.key == IdentityKey::deduplication_id &&
      std::find(offered.begin(), offered.end(), "deduplication_id") == offered.end())
    throw ConfigError("identity.key: deduplication_id: the " + c.source_type +
                      " source's messages have none (an SQS FIFO queue's do)");
  try {
    pipeline::validate(c.transform);
  } catch (const std::invalid_argument& e) {
    throw ConfigError(e.what());
  }
  // Every name the sink creates, as SQLite and MongoDB compare them (case aside): a
  // routed table may be none of the others.
  const auto routes = pipeline::routed_tables(c.transform);
  std::map<std::string, std::string> taken = {
      {lowered(c.sink_table), "sink.table"},
      {lowered(c.sink_rejects_table), "sink.rejects_table"},
      {lowered("uniq_" + c.sink_table + "_hash"), "the unique index of sink.table"}};
  for (const auto& table : routes)
    taken.emplace(lowered("uniq_" + table + "_hash"), "the unique index of " + table);
  std::map<std::string, std::string> routed;  // lowered -> as written
  for (const auto& [value, table] : c.transform.route_tables) {
    const std::string key = "route.tables." + value + ": " + table;
    if (const auto it = taken.find(lowered(table)); it != taken.end())
      throw ConfigError(key + " is " + it->second +
                        " already (names are compared without case, as SQLite and MongoDB do)");
    if (const auto [it, added] = routed.emplace(lowered(table), table);
        !added && it->second != table)
      throw ConfigError(key + " and " + it->second +
                        " differ only in case: one table to SQLite, refused by MongoDB");
  }
  const auto lists = pipeline::field_lists(c.transform);
  // A message property the chosen source does not have would be null in every record.
  // Where the file writes a field: normalize.fields[2], normalize.when.cases.1[0].
  auto key_of = [&](const std::string& where, std::size_t i) {
    const std::size_t common = c.transform.fields.size();
    return i < common ? "normalize.fields[" + std::to_string(i) + "]"
                      : where + "[" + std::to_string(i - common) + "]";
  };
  for (const auto& [where, fields] : lists)
    for (std::size_t i = 0; i < fields.size(); ++i) {
      const auto& f = fields[i];
      for (const auto& [field, name] : kSourceMeta)
        if (f.meta == field && std::find(offered.begin(), offered.end(), name) == offered.end()) {
          std::string list;
          for (const auto& o : offered) list += (list.empty() ? "" : ", ") + o;
          throw ConfigError(key_of(where, i) + ".meta: got '" + name +
                            "', expected a property the " + c.source_type + " source has (" +
                            (list.empty() ? std::string("none of its own") : list) +
                            ") or one every message has (message_id, received_time, "
                            "receive_count, source, sns_*)");
        }
      if (f.header && f.header_key != header_key)
        throw ConfigError(key_of(where, i) + "." + f.header_key + ": the " + c.source_type +
                          " source's messages have " +
                          (header_key.empty()
                               ? std::string("no attributes or headers")
                               : header_key + "s: write " + header_key + ": " + *f.header));
    }
  for (const auto& name : c.log_fields) {
    try {
      pipeline::field_in_every_version(c.transform, "logging.fields", name);
    } catch (const std::invalid_argument& e) {
      throw ConfigError(e.what());
    }
  }
  // The sink: its driver takes the pipeline's part over and checks its own keys.
  c.sink_driver = sinks::find_sink_driver(c.sink_type);
  auto sink = loading.sinks.take(c.sink_type, "sink.type", "SLUICE_SINK_TYPE");
  sinks::SinkPipeline sink_pipeline{c.transform, c.sink_table, c.sink_rejects_table, routes,
                                    c.writer.writers};
  c.sink_driver->finalize(*sink, sink_pipeline);
  c.sink = std::move(sink);
  if (c.admin_enabled) {
    if (c.metrics_listen.empty())
      throw ConfigError(
          "admin.enabled: true, but metrics.listen is empty: the admin endpoints "
          "are on the metrics server");
    const char* token = std::getenv("SLUICE_ADMIN_TOKEN");
    c.admin_token = token ? token : "";
    if (const auto problem = admin_token_problem(c.admin_token); !problem.empty())
      throw ConfigError("SLUICE_ADMIN_TOKEN (admin.enabled): " + problem);
    if (!parse_listen_address(c.metrics_listen).first.is_loopback() && c.admin_token.empty())
      throw ConfigError("admin.enabled: metrics.listen " + c.metrics_listen +
                        " is not a loopback address: set SLUICE_ADMIN_TOKEN (the bearer token "
                        "every admin request must carry)");
  }
}

// A variable of a driver that is not chosen is not read: said, since whoever set it meant
// something (a DSN without sink.type: postgres would otherwise write to SQLite unseen).
template <class Driver>
void warn_unchosen_environment(const std::string& chosen, std::vector<std::string>& warnings) {
  const std::string kind(Driver::kSection);
  for (const auto* d : drivers_of<Driver>())
    if (d->name() != chosen)
      for (const auto& o : d->options())
        if (!o.env.empty())
          if (const char* v = std::getenv(o.env.c_str()); v && *v)
            warnings.push_back(o.env + " is set, but " + kind + ".type is " + chosen + ": " +
                               section_of(*d) + "." + o.key + " is not used (set " + kind +
                               ".type: " + std::string(d->name()) + " to use it)");
}

// The environment's value of a row, applied as if the file had it.
template <class Target>
void apply_environment(const config::Option<Target>& o, const std::string& full_key,
                       Target& target) {
  if (o.env.empty()) return;
  if (const char* value = std::getenv(o.env.c_str()); value && *value) {
    const YAML::Node node{std::string(value)};
    try {
      apply_option(o, full_key, target, node, full_key + " (from " + o.env + ")");
    } catch (const ConfigError& e) {
      throw ConfigError(std::string("environment: ") + e.what());
    }
  }
}

}  // namespace

namespace {

// One pipeline from its YAML tree. `environment`: apply the variables of every key
// (one pipeline), or only of the process's own keys (several: a SLUICE_QUEUE_URL
// would set every pipeline's queue).
PipelineConfig parse_node(const YAML::Node& root, const std::string& origin, bool environment) {
  Loading loading;
  auto& config = loading.config;
  for (const auto& o : options())
    if (!o.default_value.empty() && o.apply)
      o.apply(config, YAML::Load(o.default_value), o.key + " (default)");
  config.max_body_bytes_set = false;  // only the file or the environment set these
  config.max_record_failures_set = false;
  config.concurrency_set = false;
  config.receive_scaler_set = false;
  if (!root.IsNull()) {
    if (!root.IsMap()) throw ConfigError(origin + ": expected a mapping at the top level");
    try {
      walk(loading, root, "");
    } catch (const ConfigError& e) {
      throw ConfigError(origin + ": " + e.what());
    }
  }
  // The environment: the pipeline's keys (source.type and sink.type among them), then
  // those of the chosen source and sink only (a variable meant for another source is not
  // this one's).
  for (const auto& o : options())
    if (environment || is_process_key(o.key)) apply_environment(o, o.key, config);
  if (environment) {
    warn_unchosen_environment<SourceDriver>(config.source_type, config.warnings);
    warn_unchosen_environment<SinkDriver>(config.sink_type, config.warnings);
    const auto* source = driver::find_driver(config.source_type);
    for (const auto& o : source->options())
      apply_environment(o, section_of(*source) + "." + o.key,
                        *loading.sources.settings.at(config.source_type));
    const auto* sink = sinks::find_sink_driver(config.sink_type);
    for (const auto& o : sink->options())
      apply_environment(o, section_of(*sink) + "." + o.key,
                        *loading.sinks.settings.at(config.sink_type));
  }
  try {
    finalize(loading);
  } catch (const ConfigError& e) {
    throw ConfigError(origin + ": " + e.what());
  }
  return std::move(loading.config);
}

YAML::Node load_yaml(const std::string& yaml_text, const std::string& origin) {
  // YAML is Unicode text; yaml-cpp does not check, and a stray byte would reach error
  // messages, logs and JSON documents.
  // UTF-16 and UTF-32 (with their byte-order mark) yaml-cpp reads, and converts.
  const bool wide = yaml_text.starts_with("\xFE\xFF") || yaml_text.starts_with("\xFF\xFE") ||
                    yaml_text.starts_with(std::string_view("\0\0\xFE\xFF", 4));
  if (!wide && !simdjson::validate_utf8(yaml_text.data(), yaml_text.size())) {
    // A line break is never inside a character: the first line that fails is the one.
    std::size_t line = 1, start = 0;
    for (;; ++line) {
      const auto end = std::min(yaml_text.find('\n', start), yaml_text.size());
      if (!simdjson::validate_utf8(yaml_text.data() + start, end - start)) break;
      start = end + 1;
    }
    throw ConfigError(origin + ": not valid UTF-8 text (line " + std::to_string(line) +
                      "): save the file as UTF-8");
  }
  try {
    return YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    throw ConfigError(origin + ": not valid YAML: " + e.what());
  }
}

// `over` laid on `base`: mappings merge key by key, anything else is replaced.
YAML::Node merged(const YAML::Node& base, const YAML::Node& over) {
  if (!base.IsMap() || !over.IsMap()) return YAML::Clone(over);
  YAML::Node out = YAML::Clone(base);
  for (const auto& entry : over) {
    const std::string key = entry.first.Scalar();
    const YAML::Node mine = out[key];
    out[key] = mine.IsDefined() && mine.IsMap() && entry.second.IsMap() ? merged(mine, entry.second)
                                                                        : YAML::Clone(entry.second);
  }
  return out;
}

}  // namespace

PipelineConfig parse_config(const std::string& yaml_text, const std::string& origin) {
  return parse_node(load_yaml(yaml_text, origin), origin, true);
}

namespace {
// A variable of a driver's key would set every pipeline's: refused, not guessed.
template <class Driver>
void refuse_driver_environment(const std::string& origin) {
  for (const auto* d : drivers_of<Driver>())
    for (const auto& o : d->options())
      if (!o.env.empty())
        if (const char* v = std::getenv(o.env.c_str()); v && *v)
          throw ConfigError(origin + ": " + o.env +
                            " is set, but the file has several "
                            "pipelines: set " +
                            section_of(*d) + "." + o.key + " in each pipeline instead");
}

// A mapping's choice of driver, nested (sink: {type: x}) or dotted (sink.type: x).
std::optional<std::string> type_in(const YAML::Node& node, const std::string& kind) {
  if (!node.IsDefined() || !node.IsMap()) return std::nullopt;
  if (const YAML::Node section = node[kind]; section.IsDefined() && section.IsMap())
    if (const YAML::Node type = section["type"]; type.IsDefined() && type.IsScalar())
      return type.Scalar();
  if (const YAML::Node type = node[kind + ".type"]; type.IsDefined() && type.IsScalar())
    return type.Scalar();
  return std::nullopt;
}

// Whether a mapping writes keys of driver `name`, nested or dotted.
bool writes_driver(const YAML::Node& node, const std::string& kind, const std::string& name) {
  if (!node.IsDefined() || !node.IsMap()) return false;
  if (const YAML::Node section = node[kind];
      section.IsDefined() && section.IsMap() && section[name].IsDefined())
    return true;
  const std::string prefix = kind + "." + name;
  for (const auto& entry : node) {
    const std::string key = entry.first.Scalar();
    if (key == prefix || key.starts_with(prefix + ".")) return true;
  }
  return false;
}

// The shared keys of a driver other than this pipeline's are the other pipelines':
// dropped from `merged`, nested or dotted (its own are still refused when another
// driver is chosen). The choice is the pipeline's own, else the shared one.
// (A missing key of a const node is an invalid node: IsDefined() before anything.)
template <class Driver>
void drop_other_drivers(YAML::Node& merged, const YAML::Node& own_keys) {
  const std::string kind(Driver::kSection);
  const YAML::Node& view = merged;
  const std::string chosen =
      type_in(own_keys, kind)
          .value_or(type_in(view, kind).value_or(driver_names<Driver>().front()));
  for (const auto& name : driver_names<Driver>()) {
    if (name == chosen || writes_driver(own_keys, kind, name)) continue;
    if (const YAML::Node section = view[kind]; section.IsDefined() && section.IsMap()) {
      YAML::Node writable = merged[kind];
      writable.remove(name);
    }
    const std::string prefix = kind + "." + name;
    std::vector<std::string> dotted;
    for (const auto& entry : view) {
      const std::string key = entry.first.Scalar();
      if (key == prefix || key.starts_with(prefix + ".")) dotted.push_back(key);
    }
    for (const auto& key : dotted) merged.remove(key);
  }
}
}  // namespace

std::vector<PipelineConfig> parse_pipelines(const std::string& yaml_text,
                                            const std::string& origin) {
  const YAML::Node root = load_yaml(yaml_text, origin);
  if (!root.IsMap() || !root["pipelines"]) return {parse_node(root, origin, true)};
  const YAML::Node list = root["pipelines"];
  if (!list.IsMap() || list.size() == 0)
    throw ConfigError(origin +
                      ": pipelines: expected a mapping of each pipeline's name to its "
                      "keys (source, normalize, identity, filter, sink, ...)");
  // A variable of a pipeline's key would set every pipeline's: refused, not guessed.
  for (const auto& o : options())
    if (!o.env.empty() && !is_process_key(o.key))
      if (const char* v = std::getenv(o.env.c_str()); v && *v)
        throw ConfigError(origin + ": " + o.env +
                          " is set, but the file has several pipelines: "
                          "set " +
                          o.key + " in each pipeline instead");
  refuse_driver_environment<SourceDriver>(origin);
  refuse_driver_environment<SinkDriver>(origin);
  YAML::Node shared = YAML::Clone(root);
  shared.remove("pipelines");
  std::vector<PipelineConfig> configs;
  std::map<std::string, std::string> exclusive;  // a sink's exclusive resource -> pipeline
  std::set<std::string> names;
  std::map<std::string, std::string> queues;  // source type and queue -> pipeline
  for (const auto& entry : list) {
    const std::string name = entry.first.Scalar();
    const std::string where = origin + ": pipelines." + name;
    if (!names.insert(name).second)
      throw ConfigError(where + ": given twice (a pipeline's name is its key: one each)");
    if (!entry.second.IsMap())
      throw ConfigError(where + ": expected a mapping of the pipeline's keys");
    // The process's keys, nested or dotted, belong beside pipelines.
    for (const auto& key : entry.second) {
      const std::string written = key.first.Scalar();
      const YAML::Node value = key.second;
      std::string refused;
      if (written == "name")
        throw ConfigError(where + ".name: a pipeline's name is its key under pipelines");
      if (written == "pipelines" || written == "metrics" || written.starts_with("metrics.") ||
          written == "admin" || written.starts_with("admin.") || written == "tracing" ||
          written.starts_with("tracing.") || written == "logging.level")
        refused = written;
      else if (written == "logging" && value.IsMap() && value["level"].IsDefined())
        refused = "logging.level";
      if (!refused.empty())
        throw ConfigError(where + "." + refused + ": the process has one: set " + refused +
                          " at the top level, beside pipelines");
    }
    YAML::Node node = merged(shared, entry.second);
    node["name"] = name;
    drop_other_drivers<SourceDriver>(node, entry.second);
    drop_other_drivers<SinkDriver>(node, entry.second);
    configs.push_back(parse_node(node, where, false));
    const auto& c = configs.back();
    const auto queue = c.source_type + " " + c.source_driver->queue_name(*c.source);
    if (const auto [other, fresh] = queues.emplace(queue, name); !fresh)
      throw ConfigError(where + ".source: " + c.source_driver->queue_name(*c.source) +
                        " is pipeline " + other->second +
                        "'s queue too: two pipelines would split its messages between them");
    if (const auto only = c.sink_driver->exclusive(*c.sink)) {
      const auto [other, fresh] = exclusive.emplace(c.sink_type + " " + only->canonical, name);
      if (!fresh)
        throw ConfigError(where + "." + only->key + ": " + only->shown + " is pipeline " +
                          other->second + "'s too: give each pipeline its own " + only->what);
    }
  }
  return configs;
}

namespace {
std::string read_config_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw ConfigError(path + ": is a directory, expected a YAML configuration file");
  std::ifstream in(path);
  if (!in)
    throw ConfigError(path + ": cannot read the configuration file (" + std::strerror(errno) + ")");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}
}  // namespace

PipelineConfig load_config(const std::string& path) {
  return parse_config(read_config_file(path), path);
}

std::vector<PipelineConfig> load_pipelines(const std::string& path) {
  return parse_pipelines(read_config_file(path), path);
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
      << "and those of the source drivers (`src/<source>/driver.cpp`) and the sink drivers\n"
      << "(`src/sinks/<database>/driver.cpp`); a test keeps this file and the tables in\n"
      << "step. Durations take a unit: `250ms`,\n"
      << "`20s`, `5m`, `1h`. Unknown keys, wrong types and impossible values are errors that\n"
      << "name the key, the value and what was expected. Environment variables override the\n"
      << "file. AWS credentials and region come from the usual AWS places (see README).\n\n"
      << "| key | type | default | environment | meaning |\n|---|---|---|---|---|\n";
  auto row = [&](const std::string& key, const auto& o) {
    out << "| `" << key << "` | " << cell(o.type) << " | "
        << (o.default_value.empty() ? "" : "`" + o.default_value + "`") << " | "
        << (o.env.empty() ? "" : "`" + o.env + "`") << " | " << cell(o.doc)
        << (o.secret ? " Secret: shown redacted." : "") << " |\n";
  };
  for (const auto& o : options()) row(o.key, o);
  for (const auto* d : driver::registered_drivers()) {
    const std::string section = section_of(*d);
    out << "\n## `source.type: " << d->name() << "`\n\n"
        << d->doc() << " Its keys, under `" << section
        << "`, are refused when another source is chosen.\n\n"
        << "| key | type | default | environment | meaning |\n|---|---|---|---|---|\n";
    for (const auto& o : d->options()) row(section + "." + o.key, o);
    const auto renamed = d->renamed_keys();
    if (!renamed.empty()) {
      out << "\nEarlier releases named these keys";
      for (std::size_t i = 0; i < renamed.size(); ++i)
        out << (i == 0                    ? " "
                : i + 1 == renamed.size() ? " and "
                                          : ", ")
            << "`" << renamed[i].first << "` (`" << section << "." << renamed[i].second << "`)";
      out << ": they are read under their new names, with a warning, for one release.\n";
    }
    const auto meta = d->meta_fields();
    out << "\nIts messages' own properties for `normalize.fields[].meta`: ";
    for (std::size_t i = 0; i < meta.size(); ++i) out << (i ? ", " : "") << "`" << meta[i] << "`";
    out << (meta.empty() ? "none.\n" : ".\n");
    const std::string_view headers = d->header_key();
    if (headers.empty())
      out << "Its messages have no headers for `normalize.fields[]`.\n";
    else
      out << "Its messages' " << headers << "s are read with `normalize.fields[]." << headers
          << "`.\n";
  }
  for (const auto* d : sinks::registered_sink_drivers()) {
    const std::string section = section_of(*d);
    out << "\n## `sink.type: " << d->name() << "`\n\n"
        << d->doc() << " Its keys, under `" << section
        << "`, are refused when another sink is chosen.\n\n"
        << "| key | type | default | environment | meaning |\n|---|---|---|---|---|\n";
    for (const auto& o : d->options()) row(section + "." + o.key, o);
  }
  out << "\n## Fields of `normalize.fields[]`\n\nEach field takes exactly one of `from`, `const`, "
         "`meta`, `attribute`, `header`. The lists of `normalize.when.cases` take the same keys. "
         "Checks (`values`, `min`, `max`, `min_length`, `max_length`, `pattern`) apply after "
         "the conversion and the text transforms; a value outside them is a `validation` reject "
         "naming the field, the value and the rule.\n\n"
      << "| key | type | meaning |\n|---|---|---|\n";
  for (const auto& f : field_options())
    out << "| `" << f.key << "` | " << cell(f.type) << " | " << cell(f.doc) << " |\n";
  out << "\n## Reject reasons\n\n"
      << "| reason | when |\n|---|---|\n"
      << "| `malformed` | the body is not JSON (the parser's reason), starts with a byte-order "
         "mark, has a key twice in one object, is larger than `decode.max_body_bytes`, nests "
         "deeper than `decode.max_depth`, or is not the expected SNS envelope |\n"
      << "| `validation` | a required field is missing or null, or a value fails a check "
         "(enum values, min, max, min_length, max_length, pattern) |\n"
      << "| `schema_drift` | a field does not convert to its type, the body is not an object, or "
         "its version (normalize.when) is absent or not one of the cases |\n"
      << "| `sink_refused` | the database refuses the record for good (PostgreSQL SQLSTATE "
         "classes 22 and 23, SQLite constraint/too big/mismatch, a MongoDB write error whose "
         "code is known to be permanent), or the record failed on its own "
         "`sink.max_record_failures` deliveries in a row; the detail is the database's message. "
         "Its batch-mates are written. |\n";
  for (const auto* d : driver::registered_drivers())
    for (const auto& [reason, when] : d->reject_reasons())
      out << "| `" << reason << "` | " << cell(when) << " (`source.type: " << d->name() << "`) |\n";
  return out.str();
}

std::string describe(const PipelineConfig& c) {
  std::ostringstream out;
  out << "source: " << c.source_driver->describe(*c.source, c.container) << "\n";
  out << "sink: " << c.sink_driver->describe(*c.sink) << ", batch " << c.writer.batch_size
      << ", writers " << c.writer.writers << ", a record refused after "
      << c.writer.max_record_failures << " failed deliveries"
      << (!c.max_record_failures_set &&
                  c.writer.max_record_failures != sinks::WriterOptions{}.max_record_failures
              ? " (lowered from " + std::to_string(sinks::WriterOptions{}.max_record_failures) +
                    " by the source: the queue's delivery limit)"
              : std::string())
      << "\n";
  using Key = pipeline::TransformSpec::Key;
  out << "identity: " << c.transform.hash_version << " over";
  if (c.transform.key == Key::content)
    for (const auto& f : c.transform.hash_versions.at(c.transform.hash_version)) out << " " << f;
  else if (c.transform.key == Key::deduplication_id)
    out << " the deduplication id";
  else
    out << " the " << c.transform.key_header_key << " " << c.transform.key_header;
  out << "\n";
  if (!c.transform.filter.empty())
    out << "filter: " << c.transform.filter.size() << " pattern(s), ORed\n";
  if (!c.transform.route_field.empty()) {
    out << "route: by " << c.transform.route_field << " to";
    for (const auto& table : pipeline::routed_tables(c.transform)) out << " " << table;
    out << "; other values " << (c.transform.route_unknown_rejected ? "rejected" : "to sink.table")
        << "\n";
  }
  if (c.container.max_messages_per_second > 0)
    out << "rate: at most " << c.container.max_messages_per_second << " messages a second\n";
  if (c.admin_enabled)
    out << "admin: /pipelines/" << c.name << " on " << c.metrics_listen
        << (c.admin_token.empty() ? " (no token)" : " (token from SLUICE_ADMIN_TOKEN)") << "\n";
  return out.str();
}

}  // namespace sluice::app
