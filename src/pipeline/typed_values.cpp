#include "pipeline/typed_values.hpp"

#include <date/date.h>

#include <algorithm>
#include <cmath>
#include <sstream>

namespace sluice::pipeline {
namespace {

constexpr std::int64_t kMicrosPerSecond = 1'000'000;
constexpr std::int64_t kMicrosPerDay = 86'400 * kMicrosPerSecond;
// 0001-01-01T00:00:00Z and 9999-12-31T23:59:59.999999Z: what four year digits hold.
constexpr std::int64_t kMinMicros = -62'135'596'800 * kMicrosPerSecond;
constexpr std::int64_t kMaxMicros = 253'402'300'800 * kMicrosPerSecond - 1;

bool in_range(std::int64_t micros, std::string& why) {
  if (micros >= kMinMicros && micros <= kMaxMicros) return true;
  why = "outside the years 0001-9999";
  return false;
}

// Reads exactly `n` digits at `pos`.
bool digits(std::string_view s, std::size_t& pos, int n, int& out) {
  if (pos + static_cast<std::size_t>(n) > s.size()) return false;
  out = 0;
  for (int i = 0; i < n; ++i) {
    const char c = s[pos + static_cast<std::size_t>(i)];
    if (c < '0' || c > '9') return false;
    out = out * 10 + (c - '0');
  }
  pos += static_cast<std::size_t>(n);
  return true;
}

std::int64_t floor_div(std::int64_t a, std::int64_t b) {
  return a / b - ((a % b != 0) && ((a < 0) != (b < 0)));
}

std::string_view trim_ascii(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::int64_t micros_per(EpochUnit unit) {
  switch (unit) {
    case EpochUnit::seconds:
      return kMicrosPerSecond;
    case EpochUnit::milliseconds:
      return 1000;
    case EpochUnit::microseconds:
      return 1;
    case EpochUnit::auto_detect:
      break;
  }
  return 0;
}

// auto_detect: below 1e11 the count is in seconds (until the year 5138), else in ms.
EpochUnit resolve(EpochUnit unit, double magnitude) {
  if (unit != EpochUnit::auto_detect) return unit;
  return magnitude < 1e11 ? EpochUnit::seconds : EpochUnit::milliseconds;
}

}  // namespace

std::optional<std::int64_t> parse_iso8601(std::string_view input, std::string& why) {
  const std::string_view s = trim_ascii(input);
  std::size_t pos = 0;
  int year = 0, month = 0, day = 0;
  auto fail = [&](const char* what) -> std::optional<std::int64_t> {
    why = what;
    return std::nullopt;
  };
  if (!digits(s, pos, 4, year) || pos >= s.size() || s[pos++] != '-' || !digits(s, pos, 2, month) ||
      pos >= s.size() || s[pos++] != '-' || !digits(s, pos, 2, day))
    return fail("expected an RFC 3339 timestamp (YYYY-MM-DDTHH:MM:SS[.fraction](Z|+HH:MM))");
  const date::year_month_day ymd{date::year{year}, date::month{static_cast<unsigned>(month)},
                                 date::day{static_cast<unsigned>(day)}};
  if (year < 1 || !ymd.ok()) return fail("no such date");
  std::int64_t micros =
      static_cast<std::int64_t>(date::sys_days{ymd}.time_since_epoch().count()) * kMicrosPerDay;
  if (pos == s.size()) return micros;  // a date alone: midnight UTC
  if (s[pos] != 'T' && s[pos] != 't' && s[pos] != ' ')
    return fail("expected 'T' between the date and the time");
  ++pos;
  int hour = 0, minute = 0, second = 0;
  if (!digits(s, pos, 2, hour) || pos >= s.size() || s[pos++] != ':' || !digits(s, pos, 2, minute))
    return fail("expected the time as HH:MM[:SS]");
  const bool has_seconds = pos < s.size() && s[pos] == ':';
  if (has_seconds && !digits(s, ++pos, 2, second)) return fail("expected two digits of seconds");
  if (hour > 23 || minute > 59) return fail("no such time of day");
  if (second == 60) return fail("a leap second (:60) cannot be stored");
  if (second > 59) return fail("no such time of day");
  std::int64_t fraction = 0;
  if (has_seconds && pos < s.size() && (s[pos] == '.' || s[pos] == ',')) {
    ++pos;
    int count = 0;
    for (; pos < s.size() && s[pos] >= '0' && s[pos] <= '9'; ++pos, ++count)
      if (count < 6) fraction = fraction * 10 + (s[pos] - '0');  // finer than µs: cut
    if (count == 0) return fail("expected digits after the decimal point");
    for (; count < 6; ++count) fraction *= 10;
  }
  micros += (hour * 3600LL + minute * 60LL + second) * kMicrosPerSecond + fraction;
  if (pos == s.size()) return fail("expected an offset (Z or +HH:MM): a local time is ambiguous");
  if (s[pos] == 'Z' || s[pos] == 'z') {
    ++pos;
  } else if (s[pos] == '+' || s[pos] == '-') {
    const int sign = s[pos++] == '-' ? -1 : 1;
    int off_hours = 0, off_minutes = 0;
    if (!digits(s, pos, 2, off_hours)) return fail("expected the offset as +HH:MM");
    const bool colon = pos < s.size() && s[pos] == ':';
    if (colon) ++pos;
    if ((colon || pos < s.size()) && !digits(s, pos, 2, off_minutes))
      return fail("expected the offset as +HH:MM");
    if (off_hours > 23 || off_minutes > 59) return fail("no such offset");
    micros -= sign * (off_hours * 3600LL + off_minutes * 60LL) * kMicrosPerSecond;
  } else {
    return fail("expected an offset (Z or +HH:MM)");
  }
  if (pos != s.size()) return fail("unexpected text after the timestamp");
  if (!in_range(micros, why)) return std::nullopt;
  return micros;
}

std::optional<std::int64_t> parse_with_format(std::string_view text, const std::string& format,
                                              std::string& why) {
  std::istringstream in{std::string(trim_ascii(text))};
  date::sys_time<std::chrono::microseconds> time;
  in >> date::parse(format, time);
  if (in.fail() || in.peek() != std::char_traits<char>::eof()) {
    why = "does not match the format " + format;
    return std::nullopt;
  }
  const std::int64_t micros = time.time_since_epoch().count();
  if (!in_range(micros, why)) return std::nullopt;
  return micros;
}

std::optional<std::int64_t> epoch_micros(double count, EpochUnit unit, std::string& why) {
  if (!std::isfinite(count)) {
    why = "not a finite number";
    return std::nullopt;
  }
  const double scaled = count * static_cast<double>(micros_per(resolve(unit, std::fabs(count))));
  // Rounded to the microsecond: 1700000000.123 s is 1700000000122999.9 µs in binary.
  // Bounds exact in binary (whole multiples of 2^9), then checked again as integers.
  if (!(scaled > -1e18 && scaled < 1e18)) {
    why = "outside the years 0001-9999";
    return std::nullopt;
  }
  const auto micros = static_cast<std::int64_t>(std::llround(scaled));
  if (!in_range(micros, why)) return std::nullopt;
  return micros;
}

std::optional<std::int64_t> epoch_micros(std::int64_t count, EpochUnit unit, std::string& why) {
  const double magnitude = std::fabs(static_cast<double>(count));
  const std::int64_t factor = micros_per(resolve(unit, magnitude));
  if (count > kMaxMicros / factor || count < kMinMicros / factor) {
    why = "outside the years 0001-9999";
    return std::nullopt;
  }
  return count * factor;
}

std::int64_t floor_to(std::int64_t micros, TimePrecision precision) {
  const std::int64_t step = precision == TimePrecision::seconds        ? kMicrosPerSecond
                            : precision == TimePrecision::milliseconds ? 1000
                                                                       : 1;
  return floor_div(micros, step) * step;
}

std::string format_rfc3339(std::int64_t micros, TimePrecision precision) {
  const std::int64_t days = floor_div(micros, kMicrosPerDay);
  const std::int64_t in_day = micros - days * kMicrosPerDay;
  const date::year_month_day ymd{date::sys_days{date::days{days}}};
  const std::int64_t seconds = in_day / kMicrosPerSecond;
  const std::int64_t fraction = in_day % kMicrosPerSecond;
  // Written digit by digit: snprintf was the largest cost of a timestamp field.
  char buf[32];
  char* at = buf;
  auto put = [&at](std::int64_t value, int width) {
    for (int i = width - 1; i >= 0; --i, value /= 10) at[i] = static_cast<char>('0' + value % 10);
    at += width;
  };
  put(static_cast<int>(ymd.year()), 4);
  *at++ = '-';
  put(static_cast<unsigned>(ymd.month()), 2);
  *at++ = '-';
  put(static_cast<unsigned>(ymd.day()), 2);
  *at++ = 'T';
  put(seconds / 3600, 2);
  *at++ = ':';
  put(seconds / 60 % 60, 2);
  *at++ = ':';
  put(seconds % 60, 2);
  if (precision == TimePrecision::milliseconds) {
    *at++ = '.';
    put(fraction / 1000, 3);
  } else if (precision == TimePrecision::microseconds) {
    *at++ = '.';
    put(fraction, 6);
  }
  *at++ = 'Z';
  return std::string(buf, at);
}

std::optional<std::string> canonical_decimal(std::string_view input, std::optional<int> scale,
                                             std::string& why) {
  constexpr long kMaxDigits = 1000;
  const std::string_view s = trim_ascii(input);
  std::size_t pos = 0;
  bool negative = false;
  if (pos < s.size() && (s[pos] == '-' || s[pos] == '+')) negative = s[pos++] == '-';
  std::string digits_seen;  // integer and fraction digits, the point removed
  long fraction_digits = 0;
  bool any = false;
  for (; pos < s.size() && s[pos] >= '0' && s[pos] <= '9'; ++pos, any = true)
    if (!digits_seen.empty() || s[pos] != '0') digits_seen += s[pos];
  if (pos < s.size() && s[pos] == '.') {
    for (++pos; pos < s.size() && s[pos] >= '0' && s[pos] <= '9'; ++pos, any = true) {
      digits_seen += s[pos];
      ++fraction_digits;
    }
  }
  long exponent = 0;
  if (any && pos < s.size() && (s[pos] == 'e' || s[pos] == 'E')) {
    ++pos;
    int exp_sign = 1;
    if (pos < s.size() && (s[pos] == '-' || s[pos] == '+')) exp_sign = s[pos++] == '-' ? -1 : 1;
    bool exp_any = false;
    for (; pos < s.size() && s[pos] >= '0' && s[pos] <= '9'; ++pos, exp_any = true)
      if (exponent < 100'000) exponent = exponent * 10 + (s[pos] - '0');
    if (!exp_any) any = false;
    exponent *= exp_sign;
  }
  if (!any || pos != s.size()) {
    why = "expected a decimal number such as -12.50 or 1.2e3";
    return std::nullopt;
  }
  // value = digits_seen * 10^(exponent - fraction_digits), digits_seen without leading zeros
  exponent -= fraction_digits;
  const std::size_t first = digits_seen.find_first_not_of('0');
  if (first == std::string::npos) {
    digits_seen.clear();
    exponent = 0;
  } else {
    digits_seen.erase(0, first);
    while (digits_seen.back() == '0') {
      digits_seen.pop_back();
      ++exponent;
    }
  }
  const long length = static_cast<long>(digits_seen.size());
  if (length + exponent > kMaxDigits || -exponent > kMaxDigits) {
    why = "more than 1000 digits before or after the point";
    return std::nullopt;
  }
  std::string whole, fraction;
  if (digits_seen.empty()) {
    whole = "0";
  } else if (exponent >= 0) {
    whole = digits_seen + std::string(static_cast<std::size_t>(exponent), '0');
  } else if (length > -exponent) {
    whole = digits_seen.substr(0, static_cast<std::size_t>(length + exponent));
    fraction = digits_seen.substr(static_cast<std::size_t>(length + exponent));
  } else {
    whole = "0";
    fraction = std::string(static_cast<std::size_t>(-exponent - length), '0') + digits_seen;
  }
  if (scale) {
    if (static_cast<long>(fraction.size()) > *scale) {
      why = "has " + std::to_string(fraction.size()) + " decimal places, more than scale " +
            std::to_string(*scale) + " (never rounded)";
      return std::nullopt;
    }
    fraction.resize(static_cast<std::size_t>(*scale), '0');
  }
  std::string out;
  if (negative && !digits_seen.empty()) out += '-';
  out += whole;
  if (!fraction.empty()) out += '.' + fraction;
  return out;
}

int compare_decimals(std::string_view a, std::string_view b) {
  const bool a_negative = a.starts_with('-'), b_negative = b.starts_with('-');
  if (a_negative != b_negative) return a_negative ? -1 : 1;
  if (a_negative) {
    a.remove_prefix(1);
    b.remove_prefix(1);
  }
  auto split = [](std::string_view v) {
    const auto dot = v.find('.');
    return std::pair{v.substr(0, dot), dot == std::string_view::npos ? "" : v.substr(dot + 1)};
  };
  auto [a_whole, a_fraction] = split(a);
  auto [b_whole, b_fraction] = split(b);
  int order = 0;
  if (a_whole.size() != b_whole.size())
    order = a_whole.size() < b_whole.size() ? -1 : 1;
  else if (const int c = a_whole.compare(b_whole); c != 0)
    order = c < 0 ? -1 : 1;
  else {
    const std::size_t n = std::max(a_fraction.size(), b_fraction.size());
    for (std::size_t i = 0; i < n && order == 0; ++i) {
      const char x = i < a_fraction.size() ? a_fraction[i] : '0';
      const char y = i < b_fraction.size() ? b_fraction[i] : '0';
      if (x != y) order = x < y ? -1 : 1;
    }
  }
  return a_negative ? -order : order;
}

std::optional<std::string> canonical_uuid(std::string_view text) {
  std::string_view s = trim_ascii(text);
  if (s.size() > 9) {
    std::string prefix(s.substr(0, 9));
    std::transform(prefix.begin(), prefix.end(), prefix.begin(),
                   [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; });
    if (prefix == "urn:uuid:") s.remove_prefix(9);
  }
  if (s.size() >= 2 && s.front() == '{' && s.back() == '}') s = s.substr(1, s.size() - 2);
  std::string hex;
  hex.reserve(32);
  if (s.size() == 36) {
    for (std::size_t i = 0; i < s.size(); ++i) {
      const bool dash_place = i == 8 || i == 13 || i == 18 || i == 23;
      if (dash_place != (s[i] == '-')) return std::nullopt;
      if (!dash_place) hex += s[i];
    }
  } else if (s.size() == 32) {
    hex = s;
  } else {
    return std::nullopt;
  }
  for (char& c : hex) {
    if (!std::isxdigit(static_cast<unsigned char>(c))) return std::nullopt;
    if (c >= 'A' && c <= 'F') c = static_cast<char>(c + 32);
  }
  return hex.substr(0, 8) + '-' + hex.substr(8, 4) + '-' + hex.substr(12, 4) + '-' +
         hex.substr(16, 4) + '-' + hex.substr(20);
}

}  // namespace sluice::pipeline
