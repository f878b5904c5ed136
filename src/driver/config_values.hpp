#pragma once
// Reading one configuration value from YAML, for the option table of the binary and
// the option tables of the source drivers: every error names the key, the value and
// what was expected.

#include <yaml-cpp/yaml.h>

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

// The value as an error shows it: 'text', (empty), or the node in flow style.
std::string shown(const YAML::Node& node);
[[noreturn]] void bad(const std::string& key, const YAML::Node& node, const std::string& expected);

std::string as_string(const YAML::Node& n, const std::string& key);
long long as_int(const YAML::Node& n, const std::string& key, long long min, long long max);
bool as_bool(const YAML::Node& n, const std::string& key);
std::chrono::milliseconds as_duration(const YAML::Node& n, const std::string& key,
                                      std::chrono::milliseconds min, std::chrono::milliseconds max);
// For limits an API takes in whole seconds (SQS WaitTimeSeconds, VisibilityTimeout):
// 500ms is refused, not silently made 0. `why` says who counts seconds.
std::chrono::seconds as_whole_seconds(const YAML::Node& n, const std::string& key,
                                      std::chrono::seconds min, std::chrono::seconds max,
                                      const std::string& why);
// A file that must exist and be readable when given (certificates, keys).
std::string as_file_path_or_empty(const YAML::Node& n, const std::string& key);
std::string as_enum(const YAML::Node& n, const std::string& key,
                    const std::vector<std::string>& values);
std::vector<std::string> as_string_list(const YAML::Node& n, const std::string& key);

// A library part refused an option: throws it as a ConfigError that names the YAML key,
// `prefix` + the option's name or the key `renamed` gives it; an option name that
// `renamed` lists is said as its key in the expectation too ("at least source.x").
using KeyNames = std::initializer_list<std::pair<std::string_view, std::string_view>>;
[[noreturn]] void throw_as_config_error(const OptionError& error, std::string_view prefix,
                                        KeyNames renamed = {});

}  // namespace sluice::config
