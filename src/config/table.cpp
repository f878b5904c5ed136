// The pipeline's option rows: each key with its type, default, documentation and
// how its value is read and checked.
#include <yaml-cpp/yaml.h>

#include <charconv>

#include "common/redact.hpp"
#include "config/engine.hpp"
#include "observe/admin.hpp"
#include "observe/http_endpoint.hpp"

namespace sluice::app {
using namespace config;

using driver::SourceDriver;
using sinks::SinkDriver;

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

// The keys of the process, not of one pipeline (one metrics server, one log level).
bool is_process_key(const std::string& key) {
  return key.starts_with("metrics.") || key.starts_with("admin.") || key.starts_with("tracing.") ||
         key == "logging.level";
}

template <>
const std::vector<const driver::SourceDriver*>& drivers_of<driver::SourceDriver>() {
  return driver::registered_drivers();
}
template <>
const std::vector<const sinks::SinkDriver*>& drivers_of<sinks::SinkDriver>() {
  return sinks::registered_sink_drivers();
}

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
         if (!is_pipeline_name(c.name)) bad(k, n, kPipelineNameExpected);
       }},
      {"filter", "list of patterns", "",
       "Lambda's event-filtering patterns (docs/filtering.md), ORed: body fields under body, "
       "SQS message attributes under attributes, RabbitMQ headers under headers; exact values, "
       "prefix, suffix, equals-ignore-case, anything-but, numeric, exists, $or. A message no "
       "pattern matches is acked without being written (sluice_filtered_total); a malformed one "
       "is still rejected. Empty: every message is stored.",
       [](auto& c, auto& n, auto& k) { c.transform.filter = as_filter(n, k); }},
      // --- source
      {"source.type", "enum: " + driver_list<SourceDriver>(), default_driver<SourceDriver>(),
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
      {"decode.max_body_bytes", "integer", "1048576",
       "Larger bodies are rejected as malformed, with both sizes in the reason. 1 MiB is "
       "SQS's largest inline message since 2025. Memory: each message in flight holds its "
       "body (source.max_in_flight x this at most). With "
       "source.sqs.large_payloads.enabled the default is "
       "source.sqs.large_payloads.max_bytes_in_flight (at most 1 GiB).",
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
      {"sink.type", "enum: " + driver_list<SinkDriver>(), default_driver<SinkDriver>(),
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

}  // namespace sluice::app
