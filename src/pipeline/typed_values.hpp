#pragma once
// The value types a normalized field can have beyond JSON's own: timestamps, exact
// decimals and UUIDs, each read from the forms producers write and written in one
// canonical form, so that two payloads meaning the same value hash the same.
// Pure functions; a value that does not convert returns nullopt and says why.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace sluice::pipeline {

// --- timestamps: microseconds since the Unix epoch, UTC, years 0001-9999

enum class EpochUnit { auto_detect, seconds, milliseconds, microseconds };
enum class TimePrecision { seconds, milliseconds, microseconds };
enum class TimeOutput { rfc3339, epoch_ms };

struct TimestampOptions {
  // A number (or a string of digits) counts from the epoch in this unit; auto_detect:
  // seconds below 100,000,000,000 (year 5138 in seconds, 1973 in milliseconds),
  // milliseconds from there.
  EpochUnit unit = EpochUnit::auto_detect;
  TimePrecision precision = TimePrecision::milliseconds;  // finer digits are cut (floor)
  TimeOutput output = TimeOutput::rfc3339;
  std::string format;  // strptime-like (Howard Hinnant's date::parse); empty: RFC 3339
};

// RFC 3339 / ISO 8601: "2024-02-29T23:59:59.123456+05:45", "...Z", a space for the T,
// "+0545" and "+05" offsets, a date alone (midnight UTC).
std::optional<std::int64_t> parse_iso8601(std::string_view text, std::string& why);
// With a date::parse format ("%d/%m/%Y %H:%M:%S", "%Y-%m-%d %H:%M:%S %z"); a format
// without an offset reads UTC.
std::optional<std::int64_t> parse_with_format(std::string_view text, const std::string& format,
                                              std::string& why);
// An epoch count in `unit`; fractions allowed (1700000000.5 seconds).
std::optional<std::int64_t> epoch_micros(double count, EpochUnit unit, std::string& why);
std::optional<std::int64_t> epoch_micros(std::int64_t count, EpochUnit unit, std::string& why);
// "2024-02-29T18:14:59.123Z" with the precision's digits (none for seconds).
std::string format_rfc3339(std::int64_t micros, TimePrecision precision);
std::int64_t floor_to(std::int64_t micros, TimePrecision precision);

// --- decimals: exact, as text

// "-001.2300e1" -> "-12.3"; with a scale, exactly that many fraction digits ("12.30"
// for scale 2), and more significant fraction digits than the scale do not convert
// (never rounded). "-0" is "0". At most 1,000 digits either side of the point.
std::optional<std::string> canonical_decimal(std::string_view text, std::optional<int> scale,
                                             std::string& why);
// Compares two canonical decimals (as canonical_decimal returns them): <0, 0, >0.
int compare_decimals(std::string_view a, std::string_view b);

// --- UUIDs: "0AB1...-..." in 8-4-4-4-12 form, or 32 hex digits, optionally in braces
// or after "urn:uuid:"; canonical: lowercase 8-4-4-4-12.
std::optional<std::string> canonical_uuid(std::string_view text);

}  // namespace sluice::pipeline
