#pragma once
// The option engine's parts that its files share (not an interface of the
// application): the pipeline's option table and value readers (config_table.cpp),
// normalize's field rows (config_fields.cpp), the loader (config.cpp), the merge of
// several pipelines (config_pipelines.cpp) and the generated documentation
// (config_docs.cpp).
#include <yaml-cpp/yaml.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/config.hpp"

namespace sluice::app {

// The pipeline's own rows read the YAML itself (mappings, lists of fields).
using Option = config::Option<PipelineConfig, YAML::Node>;

// The file's YAML as option rows read it (sluice/driver/value.hpp).
config::Value value_of(const YAML::Node& node);
// The readers of sluice/driver/value.hpp, on YAML.
inline std::string as_string(const YAML::Node& n, const std::string& key) {
  return config::as_string(value_of(n), key);
}
inline long long as_int(const YAML::Node& n, const std::string& key, long long min, long long max) {
  return config::as_int(value_of(n), key, min, max);
}
inline bool as_bool(const YAML::Node& n, const std::string& key) {
  return config::as_bool(value_of(n), key);
}
inline std::chrono::milliseconds as_duration(const YAML::Node& n, const std::string& key,
                                             std::chrono::milliseconds min,
                                             std::chrono::milliseconds max) {
  return config::as_duration(value_of(n), key, min, max);
}
inline std::string as_enum(const YAML::Node& n, const std::string& key,
                           const std::vector<std::string>& values) {
  return config::as_enum(value_of(n), key, values);
}
inline std::vector<std::string> as_string_list(const YAML::Node& n, const std::string& key) {
  return config::as_string_list(value_of(n), key);
}
[[noreturn]] inline void bad(const std::string& key, const YAML::Node& node,
                             const std::string& expected) {
  config::bad(key, value_of(node), expected);
}
inline std::string shown(const YAML::Node& node) {
  return value_of(node).shown();
}

// Value readers of the pipeline's own: errors name the key.
// ASCII letters in lower case (SQLite compares names so; PostgreSQL's quoted names do not).
std::string lowered(std::string text);
std::string as_decimal_text(const YAML::Node& n, const std::string& key);
nlohmann::json as_json_scalar(const YAML::Node& n, const std::string& key);
nlohmann::json as_json(const YAML::Node& n, const std::string& key);
nlohmann::json as_filter(const YAML::Node& n, const std::string& key);

// The keys of the process, not of one pipeline (one metrics server, one log level).
bool is_process_key(const std::string& key);

// The pipeline's own rows (source.*, decode.*, normalize.*, sink.*, ...).
const std::vector<Option>& options();

// The registered drivers of each kind: sources (source.type) and sinks (sink.type).
template <class Driver>
const std::vector<const Driver*>& drivers_of();
template <>
const std::vector<const driver::SourceDriver*>& drivers_of<driver::SourceDriver>();
template <>
const std::vector<const sinks::SinkDriver*>& drivers_of<sinks::SinkDriver>();

template <class Driver>
std::vector<std::string> driver_names() {
  std::vector<std::string> names;
  for (const auto* d : drivers_of<Driver>()) names.emplace_back(d->name());
  return names;
}

// The first registered (the default of source.type, sink.type); none in a binary of no
// driver of that kind.
template <class Driver>
std::string default_driver() {
  const auto& drivers = drivers_of<Driver>();
  return drivers.empty() ? std::string() : std::string(drivers.front()->name());
}

template <class Driver>
std::string driver_list() {
  std::string list;
  for (const auto& name : driver_names<Driver>()) list += (list.empty() ? "" : " | ") + name;
  return list;
}

// A driver's section: source.<name> or sink.<name>.
template <class Driver>
std::string section_of(const Driver& d) {
  return std::string(Driver::kSection) + "." + std::string(d.name());
}

// normalize.fields[] rows (config_fields.cpp).
struct FieldOption {
  std::string key;
  std::string type;
  std::string doc;
  std::function<void(pipeline::FieldSpec&, const YAML::Node&, const std::string&)> apply;
};

const std::vector<FieldOption>& field_options();
std::vector<pipeline::FieldSpec> parse_fields(const YAML::Node& list, const std::string& key);
// SinkPipeline::fields: each field of one type (and timestamp output) in every version
// that has it.
std::vector<std::pair<std::string, sinks::FieldInfo>> consistent_fields(
    const pipeline::TransformSpec& transform);
// A field a sink writes as a column of its own (sinks::SinkPipeline::field): its type, and
// its timestamp output, one in every version; throws ConfigError naming `key`.
sinks::FieldInfo field_info(const pipeline::TransformSpec& transform, const std::string& key,
                            const std::string& name);
// normalize.when: {from: /schemaVersion, cases: {"1": [fields], "2": [fields]}, absent: "1"}
pipeline::PayloadVersions parse_versions(const YAML::Node& node, const std::string& key);

// The loader (config.cpp).
// An unknown key, with the nearest known one as a suggestion.
[[noreturn]] void unknown_key(const std::string& key, const std::vector<std::string>& known);
// One pipeline from its YAML tree. `environment`: apply the variables of every key
// (one pipeline), or only of the process's own keys (several: a SLUICE_QUEUE_URL
// would set every pipeline's queue).
PipelineConfig parse_node(const YAML::Node& root, const std::string& origin, bool environment);
// The file's text as YAML, refused when it is not UTF-8 or not YAML.
YAML::Node load_yaml(const std::string& yaml_text, const std::string& origin);
// `over` laid on `base`: mappings merge key by key, anything else is replaced.
YAML::Node merged(const YAML::Node& base, const YAML::Node& over);

}  // namespace sluice::app
