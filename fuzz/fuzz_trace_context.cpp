// libFuzzer target: trace contexts as they arrive in messages (W3C traceparent and
// tracestate, X-Ray's AWSTraceHeader) and the collector URL. A context read is written
// back and read again to the same context.
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "sluice/tracing.hpp"
#include "tracing/http_post.hpp"

using namespace sluice::tracing;

namespace {
void same(const SpanContext& a, const SpanContext& b) {
  if (a.trace_id != b.trace_id || a.span_id != b.span_id || a.sampled != b.sampled) std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const auto newline = input.find('\n');
  const std::string first = input.substr(0, newline);
  const std::string rest = newline == std::string::npos ? "" : input.substr(newline + 1);
  if (auto context = parse_traceparent(first, rest)) {
    if (!context->valid()) std::abort();
    auto again = parse_traceparent(format_traceparent(*context), context->trace_state);
    if (!again) std::abort();
    same(*context, *again);
    auto xray = parse_aws_trace_header(format_aws_trace_header(*context));
    if (!xray) std::abort();
    same(*context, *xray);
  }
  if (auto context = parse_aws_trace_header(input)) {
    auto again = parse_aws_trace_header(format_aws_trace_header(*context));
    if (!again) std::abort();
    same(*context, *again);
  }
  try {
    const auto endpoint = Endpoint::parse(input);
    if (endpoint.host.empty() || endpoint.port.empty() || endpoint.target.empty()) std::abort();
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
