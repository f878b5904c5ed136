#pragma once
// A configuration value as a driver's option rows read it, and the readers that turn
// one into a setting: every error names the key, the value and what was expected.
// The loader makes Values of the file's YAML and of the environment; a driver never
// sees the parser's types.

#include <chrono>
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sluice/option_error.hpp"

namespace sluice::config {

class Value {
 public:
  enum class Kind { empty, scalar, list, other };  // other: a map
  Value() = default;                               // empty: absent, or null
  static Value of_scalar(std::string text) {
    Value v;
    v.kind_ = Kind::scalar;
    v.text_ = std::move(text);
    return v;
  }
  static Value of_list(std::vector<Value> items, std::string shown) {
    Value v;
    v.kind_ = Kind::list;
    v.items_ = std::move(items);
    v.shown_ = std::move(shown);
    return v;
  }
  static Value of_other(std::string shown) {
    Value v;
    v.kind_ = Kind::other;
    v.shown_ = std::move(shown);
    return v;
  }
  Kind kind() const { return kind_; }
  bool is_scalar() const { return kind_ == Kind::scalar; }
  const std::string& text() const { return text_; }           // a scalar's
  const std::vector<Value>& items() const { return items_; }  // a list's
  // As an error shows it: 'text', (empty), or the value in flow style ([a, b]).
  std::string shown() const {
    if (kind_ == Kind::empty) return "(empty)";
    if (kind_ == Kind::scalar) return "'" + text_ + "'";
    return shown_;
  }

 private:
  Kind kind_ = Kind::empty;
  std::string text_;
  std::vector<Value> items_;
  std::string shown_;
};

// Names the key, the value and what was expected.
class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// An error about a secret that is safe to show: it repeats the value redacted (a URI
// with its password as ***), which says more than "not shown".
struct RedactedConfigError : ConfigError {
  using ConfigError::ConfigError;
};

// "250ms", "20s", "5m", "1h"; nullopt for anything else (or a value that would overflow).
std::optional<std::chrono::milliseconds> parse_duration(const std::string& text);
// "a duration in ms, s, m or h (such as 20s), from 1s to 1h"
std::string duration_expected(std::chrono::milliseconds min, std::chrono::milliseconds max);

inline std::string shown(const Value& value) {
  return value.shown();
}
[[noreturn]] void bad(const std::string& key, const Value& value, const std::string& expected);

std::string as_string(const Value& v, const std::string& key);
long long as_int(const Value& v, const std::string& key, long long min, long long max);
bool as_bool(const Value& v, const std::string& key);
std::chrono::milliseconds as_duration(const Value& v, const std::string& key,
                                      std::chrono::milliseconds min, std::chrono::milliseconds max);
// For limits an API takes in whole seconds (SQS WaitTimeSeconds, VisibilityTimeout):
// 500ms is refused, not silently made 0. `why` says who counts seconds.
std::chrono::seconds as_whole_seconds(const Value& v, const std::string& key,
                                      std::chrono::seconds min, std::chrono::seconds max,
                                      const std::string& why);
// A file that must exist and be readable when given (certificates, keys).
std::string as_file_path_or_empty(const Value& v, const std::string& key);
std::string as_enum(const Value& v, const std::string& key, const std::vector<std::string>& values);
std::vector<std::string> as_string_list(const Value& v, const std::string& key);

// A library part refused an option: throws it as a ConfigError that names the key,
// `prefix` + the option's name or the key `renamed` gives it; an option name that
// `renamed` lists is said as its key in the expectation too ("at least source.x").
using KeyNames = std::initializer_list<std::pair<std::string_view, std::string_view>>;
[[noreturn]] void throw_as_config_error(const OptionError& error, std::string_view prefix,
                                        KeyNames renamed = {});

}  // namespace sluice::config
