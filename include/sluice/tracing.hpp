#pragma once
// Distributed tracing: a message carries its producer's trace context, Sluice's spans
// join that trace, and they go to an OpenTelemetry collector over OTLP/HTTP.
//
//  - Contexts travel as W3C `traceparent`/`tracestate` (SQS message attributes, AMQP
//    headers) or as SQS's `AWSTraceHeader` system attribute (X-Ray's format, which
//    costs none of a message's 10 attributes). Both are read; `traceparent` wins.
//  - A Tracer records spans and exports them in batches from a thread of its own,
//    through a bounded queue: when the collector is slow or down, spans are dropped
//    and counted (TracerStats), and nothing that records a span ever waits.
//  - Sampling is parent-based: a span with a parent follows the parent's decision; a
//    root is sampled with `sampling_ratio` (by its trace id, so every service that
//    samples by ratio agrees). An unsampled span records nothing but still has a
//    context to pass on.
//
// The container makes a `receive` span per receive and a `process` span per message
// (Container::set_tracer); the publishers inject the context of the message being
// handled on the calling thread (current()), or one given to them.

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace sluice::tracing {

struct SpanContext {
  std::array<std::uint8_t, 16> trace_id{};
  std::array<std::uint8_t, 8> span_id{};
  bool sampled = false;
  std::string trace_state;  // W3C tracestate, passed on unread

  bool valid() const;  // neither id all zeros
  std::string trace_id_hex() const;
  std::string span_id_hex() const;
};

// W3C Trace Context, version 00 (a later version is read by its first four fields).
std::optional<SpanContext> parse_traceparent(std::string_view traceparent,
                                             std::string_view tracestate = {});
std::string format_traceparent(const SpanContext& context);
// X-Ray: "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1".
// Without a Parent (a trace X-Ray started at the edge) there is nothing to join.
std::optional<SpanContext> parse_aws_trace_header(std::string_view header);
std::string format_aws_trace_header(const SpanContext& context);

// The names contexts travel under.
inline constexpr std::string_view kTraceparent = "traceparent";
inline constexpr std::string_view kTracestate = "tracestate";
inline constexpr std::string_view kAwsTraceHeader = "AWSTraceHeader";

// The context the calling thread works for (the container sets it while a single
// listener handles a message), or null.
const SpanContext* current();
// Makes `context` current on this thread for the scope.
class ScopedContext {
 public:
  explicit ScopedContext(const SpanContext* context);
  ~ScopedContext();
  ScopedContext(const ScopedContext&) = delete;
  ScopedContext& operator=(const ScopedContext&) = delete;

 private:
  const SpanContext* previous_;
};

enum class SpanKind { internal = 1, server = 2, client = 3, producer = 4, consumer = 5 };
using AttributeValue = std::variant<std::string, std::int64_t, double, bool>;
struct Attribute {
  std::string key;
  AttributeValue value;
};
struct Link {
  SpanContext context;
  std::vector<Attribute> attributes;
};

class Tracer;
namespace detail {
struct SpanData;  // what a recording span collects
}

// A span being recorded: it ends (and is queued for export) at end() or when
// destroyed. One thread at a time. An unsampled span ignores what it is told.
class Span {
 public:
  Span();
  Span(Span&&) noexcept;
  Span& operator=(Span&&) noexcept;
  ~Span();

  bool recording() const { return data_ != nullptr; }
  const SpanContext& context() const { return context_; }
  void set_attribute(std::string_view key, AttributeValue value);
  void add_link(const SpanContext& context, std::vector<Attribute> attributes = {});
  void set_error(std::string_view description);  // status ERROR
  void end();

 private:
  friend class Tracer;
  SpanContext context_;
  std::unique_ptr<detail::SpanData> data_;
  std::shared_ptr<Tracer> tracer_;
};

struct TracerOptions {
  // The collector's OTLP/HTTP base URL (http or https): spans go to <endpoint>/v1/traces,
  // as OTEL_EXPORTER_OTLP_ENDPOINT says. Empty: spans are made (contexts pass on) but
  // not exported.
  std::string otlp_endpoint;
  double sampling_ratio = 1.0;  // of root spans; 0..1
  std::string service_name = "sluice";
  std::vector<Attribute> resource_attributes;  // besides service.name
  // A message's `process` span is a child of its producer's span (one trace from the
  // request that sent it to the row written). Off: it starts a trace of its own and
  // links to the producer's (for producers whose traces must stay short).
  bool producer_as_parent = true;
  std::size_t max_queue_spans = 8192;   // waiting for export; beyond: dropped
  std::size_t max_export_batch = 1024;  // spans per request
  std::chrono::milliseconds export_interval{1000};
  std::chrono::milliseconds export_timeout{5000};  // a request, connect included
};

// Throws std::invalid_argument naming the option, its value and what was expected.
void validate(const TracerOptions& options);

struct TracerStats {
  std::uint64_t spans_started = 0;   // sampled spans made
  std::uint64_t spans_exported = 0;  // accepted by the collector
  std::uint64_t spans_dropped = 0;   // queue full, or the request failed
  std::uint64_t export_requests = 0;
  std::uint64_t export_failures = 0;  // requests that failed (spans dropped with them)
};

class Tracer : public std::enable_shared_from_this<Tracer> {
 public:
  // Throws std::invalid_argument naming the option and its value.
  static std::shared_ptr<Tracer> make(TracerOptions options);
  ~Tracer();
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  // `parent` (may be null or invalid: a root) decides sampling and the trace.
  Span start_span(std::string name, SpanKind kind, const SpanContext* parent,
                  std::chrono::system_clock::time_point start = std::chrono::system_clock::now());
  // A root span for work done for many messages at once (a batch written to the
  // database), linked to each of `links`: sampled when any of them is, else by ratio.
  Span start_linked_span(std::string name, SpanKind kind, std::vector<Link> links);
  // Exports what is queued and stops the exporter, waiting at most `deadline`.
  void shutdown(std::chrono::milliseconds deadline);
  TracerStats stats() const;
  const TracerOptions& options() const;

 private:
  friend class Span;
  struct Impl;
  explicit Tracer(TracerOptions options);
  void record(Span& span, std::string name, SpanKind kind,
              std::chrono::system_clock::time_point start, const SpanContext* parent);
  void finish(Span& span);
  std::shared_ptr<Impl> impl_;
};

}  // namespace sluice::tracing
