#include "amqp/stream.hpp"

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <string>

namespace sluice::amqp {

std::optional<StreamStart> parse_stream_start(std::string_view text) {
  using Kind = StreamStart::Kind;
  if (text == "first") return StreamStart{Kind::first, 0};
  if (text == "last") return StreamStart{Kind::last, 0};
  if (text == "next") return StreamStart{Kind::next, 0};
  std::int64_t offset = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), offset);
  if (error == std::errc() && end == text.data() + text.size())
    return offset >= 0 ? std::optional(StreamStart{Kind::offset, offset}) : std::nullopt;
  // A UTC time, to the second: YYYY-MM-DDTHH:MM:SSZ.
  if (text.size() != 20) return std::nullopt;
  const std::string copy(text);
  std::tm tm{};
  char zone = 0;
  int consumed = 0;
  if (std::sscanf(copy.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%c%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                  &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &zone, &consumed) != 7 ||
      consumed != 20 || zone != 'Z' || copy[4] != '-' || copy[7] != '-' || copy[10] != 'T')
    return std::nullopt;
  const int month = tm.tm_mon, day = tm.tm_mday, hour = tm.tm_hour, minute = tm.tm_min,
            second = tm.tm_sec;
  if (tm.tm_year < 1970 || month < 1 || month > 12 || day < 1 || day > 31 || hour > 23 ||
      minute > 59 || second > 60)
    return std::nullopt;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  const std::time_t seconds = timegm(&tm);
  if (tm.tm_mday != day) return std::nullopt;  // 31 April: timegm moved it to May
  return StreamStart{Kind::timestamp, static_cast<std::int64_t>(seconds)};
}

void stream_offset_argument(const StreamStart& start, amqp_table_entry_t& entry) {
  using Kind = StreamStart::Kind;
  entry.key = amqp_cstring_bytes("x-stream-offset");
  switch (start.kind) {
    case Kind::first:
    case Kind::last:
    case Kind::next:
      entry.value.kind = AMQP_FIELD_KIND_UTF8;
      entry.value.value.bytes = amqp_cstring_bytes(start.kind == Kind::first  ? "first"
                                                   : start.kind == Kind::last ? "last"
                                                                              : "next");
      return;
    case Kind::offset:
      entry.value.kind = AMQP_FIELD_KIND_I64;
      entry.value.value.i64 = start.value;
      return;
    case Kind::timestamp:
      entry.value.kind = AMQP_FIELD_KIND_TIMESTAMP;
      entry.value.value.u64 = static_cast<std::uint64_t>(start.value);
      return;
  }
}

std::optional<std::int64_t> stream_offset_of(const amqp_basic_properties_t& properties) {
  if (!(properties._flags & AMQP_BASIC_HEADERS_FLAG)) return std::nullopt;
  for (int i = 0; i < properties.headers.num_entries; ++i) {
    const auto& entry = properties.headers.entries[i];
    if (std::string_view(static_cast<const char*>(entry.key.bytes), entry.key.len) !=
        "x-stream-offset")
      continue;
    switch (entry.value.kind) {
      case AMQP_FIELD_KIND_I64:
        return entry.value.value.i64;
      case AMQP_FIELD_KIND_U64:
        if (entry.value.value.u64 > static_cast<std::uint64_t>(INT64_MAX)) return std::nullopt;
        return static_cast<std::int64_t>(entry.value.value.u64);
      case AMQP_FIELD_KIND_I32:
        return entry.value.value.i32;
      case AMQP_FIELD_KIND_U32:
        return entry.value.value.u32;
      default:
        return std::nullopt;
    }
  }
  return std::nullopt;
}

}  // namespace sluice::amqp
