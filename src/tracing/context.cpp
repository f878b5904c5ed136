// Trace contexts as they travel: W3C traceparent and X-Ray's AWSTraceHeader.
#include <algorithm>

#include "common/crypto.hpp"
#include "sluice/tracing.hpp"

namespace sluice::tracing {
namespace {

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;  // W3C: lowercase only
}

template <std::size_t N>
bool read_hex(std::string_view text, std::array<std::uint8_t, N>& out) {
  if (text.size() != 2 * N) return false;
  for (std::size_t i = 0; i < N; ++i) {
    const int hi = hex_digit(text[2 * i]), lo = hex_digit(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<std::uint8_t>(hi * 16 + lo);
  }
  return true;
}

template <std::size_t N>
bool all_zero(const std::array<std::uint8_t, N>& bytes) {
  return std::all_of(bytes.begin(), bytes.end(), [](std::uint8_t b) { return b == 0; });
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

thread_local const SpanContext* current_context = nullptr;

// W3C tracestate: at most 32 comma-separated members key=value; a key is lowercase
// letters, digits and _-*/ (with one @ for a tenant), a value printable ASCII but , and
// = (no trailing space). Anything else is not passed on.
bool valid_tracestate(std::string_view s) {
  int members = 0;
  while (!s.empty()) {
    const auto comma = s.find(',');
    auto member = trim(s.substr(0, comma));
    s = comma == std::string_view::npos ? std::string_view{} : s.substr(comma + 1);
    if (member.empty()) continue;  // empty members are allowed
    if (++members > 32) return false;
    const auto equals = member.find('=');
    if (equals == 0 || equals == std::string_view::npos || equals > 256) return false;
    const auto key = member.substr(0, equals), value = member.substr(equals + 1);
    if (value.empty() || value.size() > 256 || value.back() == ' ') return false;
    int at_signs = 0;
    for (char c : key) {
      const bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
                      c == '*' || c == '/' || (c == '@' && ++at_signs == 1);
      if (!ok) return false;
    }
    for (char c : value)
      if (c < 0x20 || c > 0x7e || c == ',' || c == '=') return false;
  }
  return true;
}

}  // namespace

bool SpanContext::valid() const {
  return !all_zero(trace_id) && !all_zero(span_id);
}
std::string SpanContext::trace_id_hex() const {
  return crypto::hex(trace_id);
}
std::string SpanContext::span_id_hex() const {
  return crypto::hex(span_id);
}

std::optional<SpanContext> parse_traceparent(std::string_view text, std::string_view tracestate) {
  text = trim(text);
  // version "-" trace-id "-" parent-id "-" flags; a later version may add "-" fields.
  if (text.size() < 55 || text[2] != '-' || text[35] != '-' || text[52] != '-') return {};
  std::array<std::uint8_t, 1> version{}, flags{};
  SpanContext context;
  if (!read_hex(text.substr(0, 2), version) || version[0] == 0xff) return {};
  if (version[0] == 0 && text.size() != 55) return {};
  if (version[0] != 0 && text.size() > 55 && text[55] != '-') return {};
  if (!read_hex(text.substr(3, 32), context.trace_id) ||
      !read_hex(text.substr(36, 16), context.span_id) || !read_hex(text.substr(53, 2), flags))
    return {};
  if (!context.valid()) return {};
  context.sampled = (flags[0] & 0x01) != 0;
  tracestate = trim(tracestate);
  // A tracestate that breaks W3C's rules is dropped (the traceparent still counts), as
  // is one longer than 512 characters, the least a vendor must pass on.
  if (tracestate.size() <= 512 && valid_tracestate(tracestate))
    context.trace_state = std::string(tracestate);
  return context;
}

std::string format_traceparent(const SpanContext& context) {
  std::string out = "00-";
  crypto::append_hex(out, context.trace_id.data(), context.trace_id.size());
  out += '-';
  crypto::append_hex(out, context.span_id.data(), context.span_id.size());
  out += context.sampled ? "-01" : "-00";
  return out;
}

std::optional<SpanContext> parse_aws_trace_header(std::string_view header) {
  SpanContext context;
  bool root = false, parent = false;
  while (!header.empty()) {
    const auto semicolon = header.find(';');
    const auto field = trim(header.substr(0, semicolon));
    header =
        semicolon == std::string_view::npos ? std::string_view{} : header.substr(semicolon + 1);
    const auto equals = field.find('=');
    if (equals == std::string_view::npos) continue;
    const auto key = trim(field.substr(0, equals));
    const auto value = trim(field.substr(equals + 1));
    if (key == "Root") {
      // "1-" 8 hex digits (epoch seconds) "-" 24 hex digits: the 32 of a W3C trace id.
      if (value.size() != 35 || value.substr(0, 2) != "1-" || value[10] != '-') return {};
      std::string digits(value.substr(2, 8));
      digits += value.substr(11, 24);
      root = read_hex(std::string_view(digits), context.trace_id);
      if (!root) return {};
    } else if (key == "Parent") {
      parent = read_hex(value, context.span_id);
      if (!parent) return {};
    } else if (key == "Sampled") {
      context.sampled = value == "1";
    }
  }
  if (!root || !parent || !context.valid()) return {};
  return context;
}

std::string format_aws_trace_header(const SpanContext& context) {
  const auto trace = context.trace_id_hex();
  std::string out = "Root=1-";
  out.append(trace, 0, 8);
  out += '-';
  out.append(trace, 8, 24);
  out += ";Parent=";
  out += context.span_id_hex();
  out += context.sampled ? ";Sampled=1" : ";Sampled=0";
  return out;
}

const SpanContext* current() {
  return current_context;
}

ScopedContext::ScopedContext(const SpanContext* context) : previous_(current_context) {
  current_context = context;
}
ScopedContext::~ScopedContext() {
  current_context = previous_;
}

}  // namespace sluice::tracing
