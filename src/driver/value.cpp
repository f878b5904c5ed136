#include "sluice/driver/value.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>

namespace sluice::config {

std::optional<std::chrono::milliseconds> parse_duration(const std::string& text) {
  std::size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (...) {
    return std::nullopt;
  }
  const std::string unit = text.substr(used);
  long long factor = 0;
  if (unit == "ms")
    factor = 1;
  else if (unit == "s")
    factor = 1000;
  else if (unit == "m")
    factor = 60'000;
  else if (unit == "h")
    factor = 3'600'000;
  else
    return std::nullopt;
  long long ms = 0;
  if (__builtin_mul_overflow(v, factor, &ms)) return std::nullopt;  // never wrap
  return std::chrono::milliseconds(ms);
}

// 3600000 ms as "1h", 1500 ms as "1500ms": the largest unit that divides it.
std::string readable(std::chrono::milliseconds d) {
  const auto ms = d.count();
  if (ms != 0 && ms % 3600000 == 0) return std::to_string(ms / 3600000) + "h";
  if (ms != 0 && ms % 60000 == 0) return std::to_string(ms / 60000) + "m";
  if (ms != 0 && ms % 1000 == 0) return std::to_string(ms / 1000) + "s";
  return std::to_string(ms) + "ms";
}

std::string duration_expected(std::chrono::milliseconds min, std::chrono::milliseconds max) {
  return "a duration in ms, s, m or h (such as 20s), from " + readable(min) + " to " +
         readable(max);
}

void bad(const std::string& key, const Value& node, const std::string& expected) {
  throw ConfigError(key + ": got " + shown(node) + ", expected " + expected);
}

std::string as_string(const Value& n, const std::string& key) {
  if (!n.is_scalar()) bad(key, n, "a string");
  return n.text();
}

long long as_int(const Value& n, const std::string& key, long long min, long long max) {
  const std::string range = "an integer from " + std::to_string(min) + " to " + std::to_string(max);
  if (!n.is_scalar()) bad(key, n, range);
  std::size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(n.text(), &used);
  } catch (...) {
    bad(key, n, range);
  }
  if (used != n.text().size() || v < min || v > max) bad(key, n, range);
  return v;
}

bool as_bool(const Value& n, const std::string& key) {
  if (n.is_scalar()) {
    const std::string& s = n.text();
    if (s == "true" || s == "yes" || s == "on") return true;
    if (s == "false" || s == "no" || s == "off") return false;
  }
  bad(key, n, "true or false");
}

std::chrono::milliseconds as_duration(const Value& n, const std::string& key,
                                      std::chrono::milliseconds min,
                                      std::chrono::milliseconds max) {
  const auto d = n.is_scalar() ? parse_duration(n.text()) : std::nullopt;
  if (!d || *d < min || *d > max) bad(key, n, duration_expected(min, max));
  return *d;
}

std::chrono::seconds as_whole_seconds(const Value& n, const std::string& key,
                                      std::chrono::seconds min, std::chrono::seconds max,
                                      const std::string& why) {
  const auto d = as_duration(n, key, min, max);
  if (d.count() % 1000 != 0)
    bad(key, n,
        "whole seconds (" + why + "), from " + std::to_string(min.count()) + "s to " +
            std::to_string(max.count()) + "s");
  return std::chrono::duration_cast<std::chrono::seconds>(d);
}

std::string as_file_path_or_empty(const Value& n, const std::string& key) {
  const std::string path = as_string(n, key);
  if (path.empty()) return path;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec) || !std::ifstream(path))
    bad(key, n, "a readable file");
  return path;
}

std::string as_enum(const Value& n, const std::string& key,
                    const std::vector<std::string>& values) {
  std::string list;
  for (const auto& v : values) list += (list.empty() ? "" : ", ") + v;
  if (!n.is_scalar() || std::find(values.begin(), values.end(), n.text()) == values.end())
    bad(key, n, values.empty() ? std::string("none: none is registered") : "one of " + list);
  return n.text();
}

std::vector<std::string> as_string_list(const Value& n, const std::string& key) {
  if (n.kind() != Value::Kind::list) bad(key, n, "a list of strings");
  std::vector<std::string> out;
  for (const auto& item : n.items()) out.push_back(as_string(item, key + "[]"));
  return out;
}

void throw_as_config_error(const OptionError& error, std::string_view prefix, KeyNames renamed) {
  std::string key = std::string(prefix) + error.option();
  std::string expected = error.expected();
  for (const auto& [option, yaml_key] : renamed) {
    if (error.option() == option) key = yaml_key;
    for (auto at = expected.find(option); at != std::string::npos;
         at = expected.find(option, at + yaml_key.size()))
      expected.replace(at, option.size(), yaml_key);
  }
  throw ConfigError(key + ": got " + error.value() + ", expected " + expected);
}

}  // namespace sluice::config
