// Several pipelines in one file: the shared keys merged under each pipeline's own,
// and the rules between pipelines (one queue, one SQLite file each).
#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <map>
#include <set>

#include "config/engine.hpp"

namespace sluice::app {
using namespace config;

using driver::SourceDriver;
using sinks::SinkDriver;

namespace {
// A variable of a driver's key would set every pipeline's: refused, not guessed.
template <class Driver>
void refuse_driver_environment(const std::string& origin) {
  for (const auto* d : drivers_of<Driver>())
    for (const auto& o : d->options())
      if (!o.env.empty())
        if (const char* v = std::getenv(o.env.c_str()); v && *v)
          throw ConfigError(origin + ": " + o.env +
                            " is set, but the file has several "
                            "pipelines: set " +
                            section_of(*d) + "." + o.key + " in each pipeline instead");
}

// A mapping's choice of driver, nested (sink: {type: x}) or dotted (sink.type: x).
std::optional<std::string> type_in(const YAML::Node& node, const std::string& kind) {
  if (!node.IsDefined() || !node.IsMap()) return std::nullopt;
  if (const YAML::Node section = node[kind]; section.IsDefined() && section.IsMap())
    if (const YAML::Node type = section["type"]; type.IsDefined() && type.IsScalar())
      return type.Scalar();
  if (const YAML::Node type = node[kind + ".type"]; type.IsDefined() && type.IsScalar())
    return type.Scalar();
  return std::nullopt;
}

// Whether a mapping writes keys of driver `name`, nested or dotted.
bool writes_driver(const YAML::Node& node, const std::string& kind, const std::string& name) {
  if (!node.IsDefined() || !node.IsMap()) return false;
  if (const YAML::Node section = node[kind];
      section.IsDefined() && section.IsMap() && section[name].IsDefined())
    return true;
  const std::string prefix = kind + "." + name;
  for (const auto& entry : node) {
    const std::string key = entry.first.Scalar();
    if (key == prefix || key.starts_with(prefix + ".")) return true;
  }
  return false;
}

// The shared keys of a driver other than this pipeline's are the other pipelines':
// dropped from `merged`, nested or dotted (its own are still refused when another
// driver is chosen). The choice is the pipeline's own, else the shared one.
// (A missing key of a const node is an invalid node: IsDefined() before anything.)
template <class Driver>
void drop_other_drivers(YAML::Node& merged, const YAML::Node& own_keys) {
  const std::string kind(Driver::kSection);
  const YAML::Node& view = merged;
  const std::string chosen =
      type_in(own_keys, kind)
          .value_or(type_in(view, kind).value_or(driver_names<Driver>().front()));
  for (const auto& name : driver_names<Driver>()) {
    if (name == chosen || writes_driver(own_keys, kind, name)) continue;
    if (const YAML::Node section = view[kind]; section.IsDefined() && section.IsMap()) {
      YAML::Node writable = merged[kind];
      writable.remove(name);
    }
    const std::string prefix = kind + "." + name;
    std::vector<std::string> dotted;
    for (const auto& entry : view) {
      const std::string key = entry.first.Scalar();
      if (key == prefix || key.starts_with(prefix + ".")) dotted.push_back(key);
    }
    for (const auto& key : dotted) merged.remove(key);
  }
}
}  // namespace

std::vector<PipelineConfig> parse_pipelines(const std::string& yaml_text,
                                            const std::string& origin) {
  const YAML::Node root = load_yaml(yaml_text, origin);
  if (!root.IsMap() || !root["pipelines"]) return {parse_node(root, origin, true)};
  const YAML::Node list = root["pipelines"];
  if (!list.IsMap() || list.size() == 0)
    throw ConfigError(origin +
                      ": pipelines: expected a mapping of each pipeline's name to its "
                      "keys (source, normalize, identity, filter, sink, ...)");
  // A variable of a pipeline's key would set every pipeline's: refused, not guessed.
  for (const auto& o : options())
    if (!o.env.empty() && !is_process_key(o.key))
      if (const char* v = std::getenv(o.env.c_str()); v && *v)
        throw ConfigError(origin + ": " + o.env +
                          " is set, but the file has several pipelines: "
                          "set " +
                          o.key + " in each pipeline instead");
  refuse_driver_environment<SourceDriver>(origin);
  refuse_driver_environment<SinkDriver>(origin);
  YAML::Node shared = YAML::Clone(root);
  shared.remove("pipelines");
  std::vector<PipelineConfig> configs;
  std::map<std::string, std::string> exclusive;  // a sink's exclusive resource -> pipeline
  std::set<std::string> names;
  std::map<std::string, std::string> queues;  // source type and queue -> pipeline
  for (const auto& entry : list) {
    const std::string name = entry.first.Scalar();
    const std::string where = origin + ": pipelines." + name;
    if (!names.insert(name).second)
      throw ConfigError(where + ": given twice (a pipeline's name is its key: one each)");
    if (!entry.second.IsMap())
      throw ConfigError(where + ": expected a mapping of the pipeline's keys");
    // The process's keys, nested or dotted, belong beside pipelines.
    for (const auto& key : entry.second) {
      const std::string written = key.first.Scalar();
      const YAML::Node value = key.second;
      std::string refused;
      if (written == "name")
        throw ConfigError(where + ".name: a pipeline's name is its key under pipelines");
      if (written == "pipelines" || written == "metrics" || written.starts_with("metrics.") ||
          written == "admin" || written.starts_with("admin.") || written == "tracing" ||
          written.starts_with("tracing.") || written == "logging.level")
        refused = written;
      else if (written == "logging" && value.IsMap() && value["level"].IsDefined())
        refused = "logging.level";
      if (!refused.empty())
        throw ConfigError(where + "." + refused + ": the process has one: set " + refused +
                          " at the top level, beside pipelines");
    }
    YAML::Node node = merged(shared, entry.second);
    node["name"] = name;
    drop_other_drivers<SourceDriver>(node, entry.second);
    drop_other_drivers<SinkDriver>(node, entry.second);
    configs.push_back(parse_node(node, where, false));
    const auto& c = configs.back();
    const auto queue = c.source_type + " " + c.source_driver->queue_name(*c.source);
    if (const auto [other, fresh] = queues.emplace(queue, name); !fresh)
      throw ConfigError(where + ".source: " + c.source_driver->queue_name(*c.source) +
                        " is pipeline " + other->second +
                        "'s queue too: two pipelines would split its messages between them");
    if (const auto only = c.sink_driver->exclusive(*c.sink)) {
      const auto [other, fresh] = exclusive.emplace(c.sink_type + " " + only->canonical, name);
      if (!fresh)
        throw ConfigError(where + "." + only->key + ": " + only->shown + " is pipeline " +
                          other->second + "'s too: give each pipeline its own " + only->what);
    }
  }
  return configs;
}

}  // namespace sluice::app
