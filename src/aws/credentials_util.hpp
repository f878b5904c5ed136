#pragma once
#include <chrono>
#include <optional>
#include <string_view>

namespace sluice::aws {
// "2026-11-30T10:00:00Z", fractional seconds and "+00:00" accepted.
std::optional<std::chrono::system_clock::time_point> parse_iso8601(std::string_view text);
}  // namespace sluice::aws
