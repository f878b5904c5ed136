// Spans, the sampler and the exporter: a bounded queue that a thread of its own empties
// into OTLP/HTTP requests (protobuf: the collector's native encoding, the smaller one,
// and the one whose every field the OpenTelemetry definitions check on both ends).
#include <opentelemetry/proto/collector/trace/v1/trace_service.pb.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>
#include <utility>

#include "common/redact.hpp"
#include "common/thread_name.hpp"
#include "sluice/tracing.hpp"
#include "tracing/http_post.hpp"

namespace sluice::tracing {

namespace {
// An endpoint URL as its base (no trailing '/') and its query ("?..." or empty), the
// fragment dropped.
std::pair<std::string, std::string> split_query(std::string url) {
  url = url.substr(0, url.find('#'));
  const auto scheme_end = url.find("://");
  const auto at = url.find('?', scheme_end == std::string::npos ? 0 : scheme_end + 3);
  std::string base = url.substr(0, at);
  while (!base.empty() && base.back() == '/') base.pop_back();
  return {base, at == std::string::npos ? std::string() : url.substr(at)};
}
}  // namespace

namespace detail {
struct SpanData {
  std::string name;
  SpanKind kind = SpanKind::internal;
  std::array<std::uint8_t, 8> parent_span_id{};
  bool has_parent = false;
  bool parent_remote = false;
  std::int64_t start_ns = 0, end_ns = 0;
  std::vector<Attribute> attributes;
  std::vector<Link> links;
  bool error = false;
  std::string status_message;
};
}  // namespace detail

namespace {
namespace otlp = opentelemetry::proto;
using detail::SpanData;

std::int64_t unix_ns(std::chrono::system_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

// Ids from a generator per thread: the same quality as the SDKs' (not for secrets).
std::mt19937_64& id_generator() {
  thread_local std::mt19937_64 generator([] {
    std::random_device device;
    return (static_cast<std::uint64_t>(device()) << 32) ^ device();
  }());
  return generator;
}

template <std::size_t N>
void fill_random(std::array<std::uint8_t, N>& bytes) {
  do {
    for (std::size_t i = 0; i < N; i += 8) {
      const auto v = id_generator()();
      for (std::size_t j = 0; j < 8 && i + j < N; ++j)
        bytes[i + j] = static_cast<std::uint8_t>(v >> (8 * j));
    }
  } while (std::all_of(bytes.begin(), bytes.end(), [](std::uint8_t b) { return b == 0; }));
}

// Protobuf strings are UTF-8 and strict collectors refuse a whole request over one
// that is not: a message id or a database error is not trusted to be.
std::string utf8(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    std::size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    bool ok = n > 0 && i + n <= text.size();
    for (std::size_t k = 1; ok && k < n; ++k)
      ok = (static_cast<unsigned char>(text[i + k]) & 0xc0) == 0x80;
    if (ok && n > 1) {  // no overlong forms, surrogates or code points past U+10FFFF
      const auto c1 = static_cast<unsigned char>(text[i + 1]);
      ok = !(n == 2 && c < 0xc2) && !(n == 3 && c == 0xe0 && c1 < 0xa0) &&
           !(n == 3 && c == 0xed && c1 >= 0xa0) && !(n == 4 && c == 0xf0 && c1 < 0x90) &&
           !(n == 4 && (c > 0xf4 || (c == 0xf4 && c1 >= 0x90)));
    }
    if (ok) {
      out.append(text, i, n);
      i += n;
    } else {
      out += "\xEF\xBF\xBD";  // U+FFFD
      ++i;
    }
  }
  return out;
}

void set_value(otlp::common::v1::AnyValue& to, const AttributeValue& value) {
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>)
          to.set_string_value(utf8(v));
        else if constexpr (std::is_same_v<T, std::int64_t>)
          to.set_int_value(v);
        else if constexpr (std::is_same_v<T, double>)
          to.set_double_value(v);
        else
          to.set_bool_value(v);
      },
      value);
}

template <class Repeated>
void add_attributes(Repeated& to, const std::vector<Attribute>& attributes) {
  for (const auto& a : attributes) {
    auto* kv = to.Add();
    kv->set_key(utf8(a.key));
    set_value(*kv->mutable_value(), a.value);
  }
}

// W3C flags in the low byte; bit 8 says bit 9 is known, bit 9 that the parent is remote.
std::uint32_t span_flags(bool sampled, bool remote_known, bool remote) {
  return (sampled ? 0x01u : 0u) | (remote_known ? 0x100u : 0u) | (remote ? 0x200u : 0u);
}

// A collector's answer in a log line: one line, quotes and control bytes escaped.
std::string printable(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      static constexpr char hex[] = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

struct Record {
  SpanContext context;
  std::unique_ptr<SpanData> data;
};

}  // namespace

struct Tracer::Impl {
  TracerOptions options;
  std::uint64_t root_threshold = 0;  // a root is sampled when its id's low 8 bytes fall below
  bool sample_all = false;
  bool exporting = false;

  std::mutex mutex;
  std::condition_variable wake;
  std::vector<Record> queue;  // under mutex
  bool stopping = false;      // under mutex
  std::chrono::steady_clock::time_point stop_by{};
  std::thread exporter;
  bool exporter_done = false;  // under mutex
  std::size_t sending = 0;     // spans of the request in flight (under mutex)
  bool abandoned = false;      // the shutdown stopped waiting (under mutex)

  std::atomic<std::uint64_t> started{0}, exported{0}, dropped{0}, requests{0}, failures{0};
  std::chrono::steady_clock::time_point last_warning{};

  bool sample_root(const SpanContext& context) const {
    if (sample_all) return true;
    std::uint64_t low = 0;
    for (int i = 8; i < 16; ++i) low = (low << 8) | context.trace_id[i];
    return low < root_threshold;
  }

  void enqueue(Record record) {
    {
      std::lock_guard lock(mutex);
      if (!stopping && queue.size() < options.max_queue_spans) {
        queue.push_back(std::move(record));
        if (queue.size() < std::min(options.max_export_batch, options.max_queue_spans)) return;
      } else {
        dropped.fetch_add(1, std::memory_order_relaxed);
        return;
      }
    }
    wake.notify_one();
  }

  void run() {
    struct Done {
      Impl& impl;
      ~Done() {
        std::lock_guard lock(impl.mutex);
        impl.exporter_done = true;
        impl.wake.notify_all();
      }
    } done{*this};
    HttpPoster poster(Endpoint::parse(endpoint_url()));
    otlp::collector::trace::v1::ExportTraceServiceRequest request;
    std::vector<Record> batch;
    for (;;) {
      bool last = false;
      {
        std::unique_lock lock(mutex);
        wake.wait_for(lock, options.export_interval, [&] {
          return stopping ||
                 queue.size() >= std::min(options.max_export_batch, options.max_queue_spans);
        });
        if (stopping && (queue.empty() || std::chrono::steady_clock::now() >= stop_by)) {
          dropped.fetch_add(queue.size(), std::memory_order_relaxed);
          queue.clear();
          return;
        }
        const auto n = std::min(queue.size(), options.max_export_batch);
        batch.assign(std::make_move_iterator(queue.begin()),
                     std::make_move_iterator(queue.begin() + static_cast<std::ptrdiff_t>(n)));
        queue.erase(queue.begin(), queue.begin() + static_cast<std::ptrdiff_t>(n));
        sending = n;
        last = stopping;
      }
      if (batch.empty()) continue;
      auto timeout = options.export_timeout;
      if (last) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            stop_by - std::chrono::steady_clock::now());
        timeout = std::max(std::chrono::milliseconds(1), std::min(timeout, left));
      }
      send(poster, request, batch, timeout);
      batch.clear();
      std::lock_guard lock(mutex);
      sending = 0;
    }
  }

  // The signal's path after the base URL's own, before its query (a fragment is never
  // sent): http://c:4318/otlp?tenant=a posts to /otlp/v1/traces?tenant=a.
  std::string endpoint_url() const {
    const auto [base, query] = split_query(options.otlp_endpoint);
    return base + "/v1/traces" + query;
  }

  void encode(otlp::collector::trace::v1::ExportTraceServiceRequest& request,
              const std::vector<Record>& batch) const {
    request.Clear();
    auto* resource_spans = request.add_resource_spans();
    auto* resource = resource_spans->mutable_resource();
    std::vector<Attribute> resource_attributes{{"service.name", options.service_name},
                                               {"telemetry.sdk.name", std::string("sluice")},
                                               {"telemetry.sdk.language", std::string("cpp")}};
    resource_attributes.insert(resource_attributes.end(), options.resource_attributes.begin(),
                               options.resource_attributes.end());
    add_attributes(*resource->mutable_attributes(), resource_attributes);
    auto* scope_spans = resource_spans->add_scope_spans();
    scope_spans->mutable_scope()->set_name("sluice");
    for (const auto& record : batch) {
      const auto& d = *record.data;
      auto* span = scope_spans->add_spans();
      span->set_trace_id(record.context.trace_id.data(), record.context.trace_id.size());
      span->set_span_id(record.context.span_id.data(), record.context.span_id.size());
      if (!record.context.trace_state.empty()) span->set_trace_state(record.context.trace_state);
      if (d.has_parent) span->set_parent_span_id(d.parent_span_id.data(), d.parent_span_id.size());
      span->set_flags(span_flags(true, true, d.has_parent && d.parent_remote));
      span->set_name(utf8(d.name));
      span->set_kind(static_cast<otlp::trace::v1::Span_SpanKind>(d.kind));
      span->set_start_time_unix_nano(static_cast<std::uint64_t>(d.start_ns));
      span->set_end_time_unix_nano(static_cast<std::uint64_t>(d.end_ns));
      add_attributes(*span->mutable_attributes(), d.attributes);
      for (const auto& l : d.links) {
        auto* link = span->add_links();
        link->set_trace_id(l.context.trace_id.data(), l.context.trace_id.size());
        link->set_span_id(l.context.span_id.data(), l.context.span_id.size());
        if (!l.context.trace_state.empty()) link->set_trace_state(l.context.trace_state);
        link->set_flags(span_flags(l.context.sampled, false, false));
        add_attributes(*link->mutable_attributes(), l.attributes);
      }
      if (d.error) {
        span->mutable_status()->set_code(otlp::trace::v1::Status::STATUS_CODE_ERROR);
        span->mutable_status()->set_message(utf8(d.status_message));
      }
    }
  }

  void send(HttpPoster& poster, otlp::collector::trace::v1::ExportTraceServiceRequest& request,
            const std::vector<Record>& batch, std::chrono::milliseconds timeout) {
    encode(request, batch);
    const auto body = request.SerializeAsString();
    requests.fetch_add(1, std::memory_order_relaxed);
    const auto result = poster.post(body, "application/x-protobuf", timeout);
    const auto n = batch.size();
    // Counted under the lock: a shutdown that gave up on this request counted it already.
    std::lock_guard lock(mutex);
    if (abandoned) return;
    if (result.status >= 200 && result.status < 300) {
      std::uint64_t rejected = 0;
      otlp::collector::trace::v1::ExportTraceServiceResponse answer;
      if (!result.body.empty() && result.content_type.find("protobuf") != std::string::npos &&
          answer.ParseFromString(result.body) && answer.has_partial_success())
        rejected = static_cast<std::uint64_t>(
            std::max<std::int64_t>(0, answer.partial_success().rejected_spans()));
      rejected = std::min<std::uint64_t>(rejected, n);
      exported.fetch_add(n - rejected, std::memory_order_relaxed);
      dropped.fetch_add(rejected, std::memory_order_relaxed);
      return;
    }
    failures.fetch_add(1, std::memory_order_relaxed);
    dropped.fetch_add(n, std::memory_order_relaxed);
    // Once a minute at most: a collector that is down must not flood the log.
    const auto now = std::chrono::steady_clock::now();
    if (last_warning.time_since_epoch().count() == 0 ||
        now - last_warning > std::chrono::minutes(1)) {
      last_warning = now;
      spdlog::warn("event=trace_export_failed endpoint={} status={} dropped_spans={} error=\"{}\"",
                   common::redact_password(endpoint_url()), result.status, n,
                   printable(result.body.substr(0, 200)));
    }
  }
};

void validate(const TracerOptions& options) {
  if (!(options.sampling_ratio >= 0.0 && options.sampling_ratio <= 1.0))
    throw std::invalid_argument("sampling_ratio: got " + std::to_string(options.sampling_ratio) +
                                ", expected a number from 0 to 1");
  if (options.max_queue_spans == 0 || options.max_export_batch == 0)
    throw std::invalid_argument("max_queue_spans and max_export_batch: expected at least 1");
  if (options.export_interval.count() <= 0 || options.export_timeout.count() <= 0)
    throw std::invalid_argument("export_interval and export_timeout: expected more than 0");
  if (!options.otlp_endpoint.empty()) {
    try {
      Endpoint::parse(options.otlp_endpoint);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(std::string("otlp_endpoint: ") + e.what());
    }
    // The commonest slip: the signal's URL where the base is meant (spans would go to
    // /v1/traces/v1/traces, refused, every one dropped).
    if (split_query(options.otlp_endpoint).first.ends_with("/v1/traces"))
      throw std::invalid_argument(
          "otlp_endpoint: ends in /v1/traces; give the collector's base URL (http://HOST:4318), "
          "Sluice adds /v1/traces");
  }
}

Tracer::Tracer(TracerOptions options) : impl_(std::make_shared<Impl>()) {
  validate(options);
  impl_->sample_all = options.sampling_ratio >= 1.0;
  impl_->root_threshold =
      static_cast<std::uint64_t>(options.sampling_ratio * 18446744073709551615.0);
  impl_->exporting = !options.otlp_endpoint.empty();
  impl_->options = std::move(options);
}

std::shared_ptr<Tracer> Tracer::make(TracerOptions options) {
  std::shared_ptr<Tracer> tracer(new Tracer(std::move(options)));
  // The thread shares the state it works on: a shutdown that cannot wait for a request
  // in flight leaves it to end by itself.
  if (tracer->impl_->exporting) {
    // The exporter logs its failures: spdlog's registry is created here, before the thread,
    // so that its lazy creation cannot race with a caller configuring the logger.
    spdlog::default_logger_raw();
    tracer->impl_->exporter = std::thread([impl = tracer->impl_] {
      common::name_this_thread("sluice-trace");
      impl->run();
    });
  }
  return tracer;
}

Tracer::~Tracer() {
  shutdown(impl_->options.export_timeout);
}

void Tracer::shutdown(std::chrono::milliseconds deadline) {
  {
    std::lock_guard lock(impl_->mutex);
    if (impl_->stopping) return;
    impl_->stopping = true;
    impl_->stop_by = std::chrono::steady_clock::now() + deadline;
  }
  impl_->wake.notify_all();
  if (!impl_->exporter.joinable()) return;
  // A request in flight may hold it up to export_timeout: not past the deadline.
  std::unique_lock lock(impl_->mutex);
  const bool done = impl_->wake.wait_for(lock, deadline + std::chrono::milliseconds(100),
                                         [&] { return impl_->exporter_done; });
  if (!done) {
    // What is queued and the request in flight are lost with the process: said so.
    impl_->abandoned = true;
    if (impl_->sending > 0) impl_->failures.fetch_add(1, std::memory_order_relaxed);
    spdlog::warn(
        "event=trace_export_abandoned endpoint={} dropped_spans={} (the collector did not answer "
        "within the stop's {} ms)",
        common::redact_password(impl_->endpoint_url()), impl_->queue.size() + impl_->sending,
        deadline.count());
    impl_->dropped.fetch_add(impl_->queue.size() + impl_->sending, std::memory_order_relaxed);
    impl_->queue.clear();
    impl_->sending = 0;
  }
  lock.unlock();
  if (done)
    impl_->exporter.join();
  else
    impl_->exporter.detach();
}

TracerStats Tracer::stats() const {
  TracerStats s;
  s.spans_started = impl_->started.load();
  s.spans_exported = impl_->exported.load();
  s.spans_dropped = impl_->dropped.load();
  s.export_requests = impl_->requests.load();
  s.export_failures = impl_->failures.load();
  return s;
}

const TracerOptions& Tracer::options() const {
  return impl_->options;
}

Span Tracer::start_span(std::string name, SpanKind kind, const SpanContext* parent,
                        std::chrono::system_clock::time_point start) {
  Span span;
  const bool has_parent = parent && parent->valid();
  if (has_parent) {
    span.context_.trace_id = parent->trace_id;
    span.context_.trace_state = parent->trace_state;
    span.context_.sampled = parent->sampled;
  } else {
    fill_random(span.context_.trace_id);
    span.context_.sampled = impl_->sample_root(span.context_);
  }
  fill_random(span.context_.span_id);
  record(span, std::move(name), kind, start, has_parent ? parent : nullptr);
  return span;
}

Span Tracer::start_linked_span(std::string name, SpanKind kind, std::vector<Link> links) {
  Span span;
  fill_random(span.context_.trace_id);
  fill_random(span.context_.span_id);
  span.context_.sampled =
      std::any_of(links.begin(), links.end(),
                  [](const Link& l) { return l.context.sampled && l.context.valid(); }) ||
      impl_->sample_root(span.context_);
  record(span, std::move(name), kind, std::chrono::system_clock::now(), nullptr);
  if (span.data_)
    for (auto& link : links)
      if (link.context.valid()) span.data_->links.push_back(std::move(link));
  return span;
}

void Tracer::record(Span& span, std::string name, SpanKind kind,
                    std::chrono::system_clock::time_point start, const SpanContext* parent) {
  if (!span.context_.sampled || !impl_->exporting) return;
  impl_->started.fetch_add(1, std::memory_order_relaxed);
  span.data_ = std::make_unique<SpanData>();
  span.data_->name = std::move(name);
  span.data_->kind = kind;
  span.data_->start_ns = unix_ns(start);
  if (parent) {
    span.data_->has_parent = true;
    span.data_->parent_span_id = parent->span_id;
    span.data_->parent_remote = true;
  }
  span.tracer_ = shared_from_this();
}

void Tracer::finish(Span& span) {
  span.data_->end_ns = unix_ns(std::chrono::system_clock::now());
  impl_->enqueue(Record{span.context_, std::move(span.data_)});
}

Span::Span() = default;
Span::Span(Span&&) noexcept = default;
Span& Span::operator=(Span&& other) noexcept {
  if (this != &other) {
    end();
    context_ = std::move(other.context_);
    data_ = std::move(other.data_);
    tracer_ = std::move(other.tracer_);
  }
  return *this;
}
Span::~Span() {
  end();
}

void Span::set_attribute(std::string_view key, AttributeValue value) {
  if (data_) data_->attributes.push_back({std::string(key), std::move(value)});
}
void Span::add_link(const SpanContext& context, std::vector<Attribute> attributes) {
  if (data_ && context.valid()) data_->links.push_back({context, std::move(attributes)});
}
void Span::set_error(std::string_view description) {
  if (!data_) return;
  data_->error = true;
  data_->status_message = std::string(description);
}
void Span::end() {
  if (!data_) return;
  auto tracer = std::move(tracer_);
  tracer->finish(*this);
}

}  // namespace sluice::tracing
