// The option engine's loader: a YAML file (and the environment) read into a
// PipelineConfig, every key checked against its row and the drivers' rows.
#include <simdjson.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "config/config.hpp"
#include "config/engine.hpp"
#include "observe/admin.hpp"
#include "observe/http_endpoint.hpp"

namespace sluice::app {
using namespace config;

config::Value value_of(const YAML::Node& node) {
  if (!node.IsDefined() || node.IsNull()) return {};
  if (node.IsScalar()) return Value::of_scalar(node.Scalar());
  YAML::Emitter flow;
  flow << YAML::Flow << node;
  if (!node.IsSequence()) return Value::of_other(flow.c_str());
  std::vector<Value> items;
  for (const auto& item : node) items.push_back(value_of(item));
  return Value::of_list(std::move(items), flow.c_str());
}

std::chrono::milliseconds duration_flag(const std::string& flag, const std::string& value,
                                        std::chrono::milliseconds min,
                                        std::chrono::milliseconds max) {
  const auto d = parse_duration(value);
  if (!d || *d < min || *d > max)
    throw std::invalid_argument(flag + ": got '" + value + "', expected " +
                                duration_expected(min, max));
  return *d;
}

namespace {

using driver::SourceDriver;
using sinks::SinkDriver;
using std::chrono::milliseconds;

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j)
      cur[j] =
          std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

}  // namespace

[[noreturn]] void unknown_key(const std::string& key, const std::vector<std::string>& known) {
  std::string best;
  std::size_t best_distance = 4;
  for (const auto& k : known) {
    const auto d = edit_distance(key, k);
    if (d < best_distance) best = k, best_distance = d;
  }
  throw ConfigError("unknown key " + key + (best.empty() ? "" : "; did you mean " + best + "?"));
}

namespace {

// Every value goes through here: errors name the key and the environment variable
// that can set it, and a secret's value is never repeated. `full_key` is the row's
// key as the file writes it (source.sqs.queue_url for a driver's queue_url).
template <class Target, class Node>
void apply_option(const config::Option<Target, Node>& o, const std::string& full_key,
                  Target& target, const YAML::Node& node, const std::string& key) {
  try {
    if constexpr (std::is_same_v<Node, YAML::Node>)
      o.apply(target, node, key);
    else
      o.apply(target, value_of(node), key);
  } catch (const ConfigError& e) {
    std::string what = o.secret && !dynamic_cast<const RedactedConfigError*>(&e)
                           ? key + ": expected " + o.type + " (the value is secret: not shown)"
                           : e.what();
    if (!o.env.empty() && what.find(o.env) == std::string::npos)
      what += " [key " + full_key + ", environment variable " + o.env + "]";
    throw ConfigError(what);
  }
}

const Option* find_option(const std::string& key) {
  for (const auto& o : options())
    if (o.key == key) return &o;
  return nullptr;
}

// A driver's own key: its row and the driver.
template <class Driver>
struct DriverKey {
  const Driver* driver = nullptr;
  const config::Option<typename Driver::SettingsBase>* option = nullptr;
};
template <class Driver>
DriverKey<Driver> find_driver_option(const std::string& key) {
  for (const auto* d : drivers_of<Driver>()) {
    const std::string prefix = section_of(*d) + ".";
    if (!key.starts_with(prefix)) continue;
    for (const auto& o : d->options())
      if (key.compare(prefix.size(), std::string::npos, o.key) == 0) return {d, &o};
  }
  return {};
}
bool is_driver_key(const std::string& key) {
  return find_driver_option<SourceDriver>(key).option || find_driver_option<SinkDriver>(key).option;
}

// A key of an earlier release (source.queue_url): its new name (source.sqs.queue_url).
template <class Driver>
std::optional<std::string> renamed_in(const std::string& key) {
  for (const auto* d : drivers_of<Driver>())
    for (const auto& [old_key, own_key] : d->renamed_keys())
      if (old_key == key) return section_of(*d) + "." + own_key;
  return std::nullopt;
}
std::optional<std::string> renamed(const std::string& key) {
  if (auto now = renamed_in<SourceDriver>(key)) return now;
  return renamed_in<SinkDriver>(key);
}

// Every key of the drivers of one kind, with or without the earlier names.
template <class Driver>
void add_driver_keys(std::vector<std::string>& keys, bool with_old_names) {
  for (const auto* d : drivers_of<Driver>()) {
    for (const auto& o : d->options()) keys.push_back(section_of(*d) + "." + o.key);
    if (with_old_names)
      for (const auto& [old_key, own_key] : d->renamed_keys()) keys.push_back(old_key);
  }
}

// Every key, of the pipeline's table and of every driver's, with or without the earlier
// names, for "did you mean" suggestions and for sections.
std::vector<std::string> full_keys(bool with_old_names) {
  std::vector<std::string> keys;
  for (const auto& o : options()) keys.push_back(o.key);
  add_driver_keys<SourceDriver>(keys, with_old_names);
  add_driver_keys<SinkDriver>(keys, with_old_names);
  return keys;
}

bool is_section(const std::string& key) {
  for (const auto& k : full_keys(true))
    if (k.rfind(key + ".", 0) == 0) return true;
  return false;
}

// Every option and every section above one (not the earlier names), for suggestions.
std::vector<std::string> all_keys() {
  std::set<std::string> keys;
  for (const auto& k : full_keys(false)) {
    keys.insert(k);
    for (auto dot = k.find('.'); dot != std::string::npos; dot = k.find('.', dot + 1))
      keys.insert(k.substr(0, dot));
  }
  return {keys.begin(), keys.end()};
}

// Every driver's section of one kind, since source.type or sink.type may come after
// them (or from the environment), with its defaults applied.
template <class Driver>
struct Sections {
  std::map<std::string, std::unique_ptr<typename Driver::SettingsBase>, std::less<>> settings;
  std::map<std::string, std::string, std::less<>> written;  // driver -> the first key given

  Sections() {
    for (const auto* d : drivers_of<Driver>()) {
      auto made = d->make_settings();
      for (const auto& o : d->options())
        if (!o.default_value.empty())
          o.apply(*made, value_of(YAML::Load(o.default_value)), o.key + " (default)");
      settings.emplace(std::string(d->name()), std::move(made));
    }
  }
  // Applies a key of one of its drivers; false when none has it.
  bool apply(const std::string& key, const std::string& written_as, const YAML::Node& value);
  // The chosen driver's settings. Keys given of another driver are refused, not ignored:
  // `type_key` names the choice, `type_env` the variable that may have made it.
  std::unique_ptr<typename Driver::SettingsBase> take(const std::string& chosen,
                                                      const std::string& type_key,
                                                      const std::string& type_env);
};

template <class Driver>
bool Sections<Driver>::apply(const std::string& key, const std::string& written_as,
                             const YAML::Node& value) {
  const auto own = find_driver_option<Driver>(key);
  if (!own.option) return false;
  const std::string name(own.driver->name());
  written.try_emplace(name, written_as);
  apply_option(*own.option, key, *settings.at(name), value,
               key == written_as ? key : key + " (written " + written_as + ")");
  return true;
}

template <class Driver>
std::unique_ptr<typename Driver::SettingsBase> Sections<Driver>::take(const std::string& chosen,
                                                                      const std::string& type_key,
                                                                      const std::string& type_env) {
  const char* from_environment = std::getenv(type_env.c_str());
  const std::string origin =
      from_environment && *from_environment ? " (from " + type_env + ")" : "";
  const std::string kind(Driver::kSection);
  for (const auto& [name, key] : written)
    if (name != chosen)
      throw ConfigError(key + ": set, but " + type_key + " is " + chosen + origin + " (keys of a " +
                        kind + " that is not chosen are refused: remove them, or set " +
                        (origin.empty() ? type_key + ": " + name : type_env + "=" + name) + ")");
  return std::move(settings.find(chosen)->second);
}

// What the loader holds until finalize.
struct Loading {
  PipelineConfig config;
  Sections<SourceDriver> sources;
  Sections<SinkDriver> sinks;
  std::map<std::string, std::string> renamed_from;  // new key -> the old name it was given as
  std::set<std::string> given_as_new;               // new keys given under their new name
};

void walk(Loading& loading, const YAML::Node& node, const std::string& prefix) {
  auto& config = loading.config;
  for (const auto& entry : node) {
    const std::string written =
        prefix.empty() ? entry.first.Scalar() : prefix + "." + entry.first.Scalar();
    std::string key = written;
    if (find_option(key) == nullptr && !is_driver_key(key)) {
      if (auto now = renamed(key)) {
        config.warnings.push_back(key + " is now " + *now +
                                  " (read under its new name; the old name will be refused in "
                                  "the next release)");
        key = *now;
        loading.renamed_from[key] = written;
      }
    } else if (is_driver_key(key)) {
      loading.given_as_new.insert(key);
    }
    // One value from one place: an old name beside its new one is a mistake, not a merge.
    if (const auto old = loading.renamed_from.find(key);
        old != loading.renamed_from.end() && loading.given_as_new.count(key))
      throw ConfigError(key + ": given twice, also as " + old->second +
                        " (its name in earlier releases): keep " + key + " only");
    if (key == "pipelines") {
      throw ConfigError(
          "pipelines: several pipelines are read by `sluice run` and `sluice "
          "config check` (load_pipelines), not as one pipeline");
    } else if (key == "normalize.fields") {
      config.transform.fields = parse_fields(entry.second, key);
    } else if (key == "normalize.when") {
      config.transform.versions = parse_versions(entry.second, key);
    } else if (const Option* option = find_option(key)) {
      apply_option(*option, key, config, entry.second, key);
    } else if (loading.sources.apply(key, written, entry.second) ||
               loading.sinks.apply(key, written, entry.second)) {
      // a source's or a sink's own key: kept in its driver's section until finalize
    } else if (is_section(key)) {
      if (!entry.second.IsMap()) bad(key, entry.second, "a mapping");
      walk(loading, entry.second, key);
    } else {
      unknown_key(key, all_keys());
    }
  }
}

// normalize.fields[].meta names that only some sources have.
const std::pair<pipeline::MetaField, const char*> kSourceMeta[] = {
    {pipeline::MetaField::sent_time, "sent_time"},
    {pipeline::MetaField::group_id, "group_id"},
    {pipeline::MetaField::sequence_number, "sequence_number"}};

void finalize(Loading& loading) {
  auto& c = loading.config;
  c.source_driver = driver::find_driver(c.source_type);
  const auto& source = *c.source_driver;
  auto settings = loading.sources.take(c.source_type, "source.type", "SLUICE_SOURCE_TYPE");
  driver::PipelineSettings pipeline_settings{
      c.container,
      c.transform.max_body_bytes,
      c.max_body_bytes_set,
      c.writer.max_record_failures,
      c.max_record_failures_set,
      c.concurrency_set,
      c.receive_scaler_set,
      c.transform.key == pipeline::TransformSpec::Key::deduplication_id};
  source.finalize(*settings, pipeline_settings);
  c.source = std::move(settings);
  c.container.name = c.name;               // the container's log lines name their pipeline
  c.container.ack_mode = AckMode::manual;  // the sink writer settles each message
  // The stages are quick and never block (the writers do the I/O), so a received
  // batch is handled in one worker call: one thread hand-off per poll, not per message.
  c.container.listener_mode = ListenerMode::batch;
  // The writers keep each ordered group's order (one writer at a time per group, in the
  // order handed over, none written after one of its group that failed): a FIFO group
  // goes out a run at a time, not a message per write.
  c.container.ordered_group_runs = true;
  c.writer.dead_letter_queue = source.dead_letters(*c.source);
  // The container's checks speak of its own option names: say the YAML keys instead.
  try {
    validate(c.container);
  } catch (const OptionError& e) {
    throw_as_config_error(e, "source.",
                          {{"failure_backoff_base", "source.failure_backoff"},
                           {"error_backoff_max", "source.receive_error_backoff_max"},
                           {"min_concurrent_receives", "source.concurrency (MIN)"},
                           {"max_concurrent_receives", "source.concurrency (MAX)"}});
  }
  const std::string header_key(source.header_key());
  const auto offered = source.meta_fields();
  c.transform.filter_headers = header_key.empty() ? "" : header_key + "s";
  using IdentityKey = pipeline::TransformSpec::Key;
  if (c.transform.key == IdentityKey::header && c.transform.key_header_key != header_key)
    throw ConfigError("identity.key." + c.transform.key_header_key + ": the " + c.source_type +
                      " source's messages have " +
                      (header_key.empty() ? std::string("no attributes or headers")
                                          : header_key + "s: write {" + header_key + ": " +
                                                c.transform.key_header + "}"));
  if (c.transform.key == IdentityKey::deduplication_id &&
      std::find(offered.begin(), offered.end(), "deduplication_id") == offered.end())
    throw ConfigError("identity.key: deduplication_id: the " + c.source_type +
                      " source's messages have none (an SQS FIFO queue's do)");
  try {
    pipeline::validate(c.transform);
  } catch (const std::invalid_argument& e) {
    throw ConfigError(e.what());
  }
  // Every name the sink creates, as SQLite and MongoDB compare them (case aside): a
  // routed table may be none of the others.
  const auto routes = pipeline::routed_tables(c.transform);
  std::map<std::string, std::string> taken = {
      {lowered(c.sink_table), "sink.table"},
      {lowered(c.sink_rejects_table), "sink.rejects_table"},
      {lowered("uniq_" + c.sink_table + "_hash"), "the unique index of sink.table"}};
  for (const auto& table : routes)
    taken.emplace(lowered("uniq_" + table + "_hash"), "the unique index of " + table);
  std::map<std::string, std::string> routed;  // lowered -> as written
  for (const auto& [value, table] : c.transform.route_tables) {
    const std::string key = "route.tables." + value + ": " + table;
    if (const auto it = taken.find(lowered(table)); it != taken.end())
      throw ConfigError(key + " is " + it->second +
                        " already (names are compared without case, as SQLite and MongoDB do)");
    if (const auto [it, added] = routed.emplace(lowered(table), table);
        !added && it->second != table)
      throw ConfigError(key + " and " + it->second +
                        " differ only in case: one table to SQLite, refused by MongoDB");
  }
  const auto lists = pipeline::field_lists(c.transform);
  // A message property the chosen source does not have would be null in every record.
  // Where the file writes a field: normalize.fields[2], normalize.when.cases.1[0].
  auto key_of = [&](const std::string& where, std::size_t i) {
    const std::size_t common = c.transform.fields.size();
    return i < common ? "normalize.fields[" + std::to_string(i) + "]"
                      : where + "[" + std::to_string(i - common) + "]";
  };
  for (const auto& [where, fields] : lists)
    for (std::size_t i = 0; i < fields.size(); ++i) {
      const auto& f = fields[i];
      for (const auto& [field, name] : kSourceMeta)
        if (f.meta == field && std::find(offered.begin(), offered.end(), name) == offered.end()) {
          std::string list;
          for (const auto& o : offered) list += (list.empty() ? "" : ", ") + o;
          throw ConfigError(key_of(where, i) + ".meta: got '" + name +
                            "', expected a property the " + c.source_type + " source has (" +
                            (list.empty() ? std::string("none of its own") : list) +
                            ") or one every message has (message_id, received_time, "
                            "receive_count, source, sns_*)");
        }
      if (f.header && f.header_key != header_key)
        throw ConfigError(key_of(where, i) + "." + f.header_key + ": the " + c.source_type +
                          " source's messages have " +
                          (header_key.empty()
                               ? std::string("no attributes or headers")
                               : header_key + "s: write " + header_key + ": " + *f.header));
    }
  for (const auto& name : c.log_fields) {
    try {
      pipeline::field_in_every_version(c.transform, "logging.fields", name);
    } catch (const std::invalid_argument& e) {
      throw ConfigError(e.what());
    }
  }
  // The sink: its driver takes the pipeline's part over and checks its own keys.
  c.sink_driver = sinks::find_sink_driver(c.sink_type);
  auto sink = loading.sinks.take(c.sink_type, "sink.type", "SLUICE_SINK_TYPE");
  sinks::SinkPipeline sink_pipeline{c.transform.hash_field,
                                    c.sink_table,
                                    c.sink_rejects_table,
                                    routes,
                                    c.writer.writers,
                                    [&c](const std::string& key, const std::string& name) {
                                      return field_info(c.transform, key, name);
                                    },
                                    consistent_fields(c.transform)};
  c.sink_driver->finalize(*sink, sink_pipeline);
  c.sink = std::move(sink);
  if (c.admin_enabled) {
    if (c.metrics_listen.empty())
      throw ConfigError(
          "admin.enabled: true, but metrics.listen is empty: the admin endpoints "
          "are on the metrics server");
    const char* token = std::getenv("SLUICE_ADMIN_TOKEN");
    c.admin_token = token ? token : "";
    if (const auto problem = admin_token_problem(c.admin_token); !problem.empty())
      throw ConfigError("SLUICE_ADMIN_TOKEN (admin.enabled): " + problem);
    if (!parse_listen_address(c.metrics_listen).first.is_loopback() && c.admin_token.empty())
      throw ConfigError("admin.enabled: metrics.listen " + c.metrics_listen +
                        " is not a loopback address: set SLUICE_ADMIN_TOKEN (the bearer token "
                        "every admin request must carry)");
  }
}

// A variable of a driver that is not chosen is not read: said, since whoever set it meant
// something (a DSN without sink.type: postgres would otherwise write to SQLite unseen).
template <class Driver>
void warn_unchosen_environment(const std::string& chosen, std::vector<std::string>& warnings) {
  const std::string kind(Driver::kSection);
  for (const auto* d : drivers_of<Driver>())
    if (d->name() != chosen)
      for (const auto& o : d->options())
        if (!o.env.empty())
          if (const char* v = std::getenv(o.env.c_str()); v && *v)
            warnings.push_back(o.env + " is set, but " + kind + ".type is " + chosen + ": " +
                               section_of(*d) + "." + o.key + " is not used (set " + kind +
                               ".type: " + std::string(d->name()) + " to use it)");
}

// The environment's value of a row, applied as if the file had it.
template <class Target, class Node>
void apply_environment(const config::Option<Target, Node>& o, const std::string& full_key,
                       Target& target) {
  if (o.env.empty()) return;
  if (const char* value = std::getenv(o.env.c_str()); value && *value) {
    const YAML::Node node{std::string(value)};
    try {
      apply_option(o, full_key, target, node, full_key + " (from " + o.env + ")");
    } catch (const ConfigError& e) {
      throw ConfigError(std::string("environment: ") + e.what());
    }
  }
}

}  // namespace

namespace {

// A value given was checked by its row; none is left only in a binary of no driver of
// that kind (no default).
template <class Driver>
void require_chosen(const std::string& type, const std::string& key) {
  if (!type.empty()) return;
  const auto list = driver_list<Driver>();
  throw ConfigError(key + ": missing, expected " +
                    (list.empty() ? std::string("none: none is registered") : "one of " + list));
}

}  // namespace

// One pipeline from its YAML tree. `environment`: apply the variables of every key
// (one pipeline), or only of the process's own keys (several: a SLUICE_QUEUE_URL
// would set every pipeline's queue).
PipelineConfig parse_node(const YAML::Node& root, const std::string& origin, bool environment) {
  Loading loading;
  auto& config = loading.config;
  for (const auto& o : options())
    if (!o.default_value.empty() && o.apply)
      o.apply(config, YAML::Load(o.default_value), o.key + " (default)");
  config.max_body_bytes_set = false;  // only the file or the environment set these
  config.max_record_failures_set = false;
  config.concurrency_set = false;
  config.receive_scaler_set = false;
  if (!root.IsNull()) {
    if (!root.IsMap()) throw ConfigError(origin + ": expected a mapping at the top level");
    try {
      walk(loading, root, "");
    } catch (const ConfigError& e) {
      throw ConfigError(origin + ": " + e.what());
    }
  }
  // The environment: the pipeline's keys (source.type and sink.type among them), then
  // those of the chosen source and sink only (a variable meant for another source is not
  // this one's).
  for (const auto& o : options())
    if (environment || is_process_key(o.key)) apply_environment(o, o.key, config);
  require_chosen<SourceDriver>(config.source_type, "source.type");
  require_chosen<SinkDriver>(config.sink_type, "sink.type");
  if (environment) {
    warn_unchosen_environment<SourceDriver>(config.source_type, config.warnings);
    warn_unchosen_environment<SinkDriver>(config.sink_type, config.warnings);
    const auto* source = driver::find_driver(config.source_type);
    for (const auto& o : source->options())
      apply_environment(o, section_of(*source) + "." + o.key,
                        *loading.sources.settings.at(config.source_type));
    const auto* sink = sinks::find_sink_driver(config.sink_type);
    for (const auto& o : sink->options())
      apply_environment(o, section_of(*sink) + "." + o.key,
                        *loading.sinks.settings.at(config.sink_type));
  }
  try {
    finalize(loading);
  } catch (const ConfigError& e) {
    throw ConfigError(origin + ": " + e.what());
  }
  return std::move(loading.config);
}

YAML::Node load_yaml(const std::string& yaml_text, const std::string& origin) {
  // YAML is Unicode text; yaml-cpp does not check, and a stray byte would reach error
  // messages, logs and JSON documents.
  // UTF-16 and UTF-32 (with their byte-order mark) yaml-cpp reads, and converts.
  const bool wide = yaml_text.starts_with("\xFE\xFF") || yaml_text.starts_with("\xFF\xFE") ||
                    yaml_text.starts_with(std::string_view("\0\0\xFE\xFF", 4));
  if (!wide && !simdjson::validate_utf8(yaml_text.data(), yaml_text.size())) {
    // A line break is never inside a character: the first line that fails is the one.
    std::size_t line = 1, start = 0;
    for (;; ++line) {
      const auto end = std::min(yaml_text.find('\n', start), yaml_text.size());
      if (!simdjson::validate_utf8(yaml_text.data() + start, end - start)) break;
      start = end + 1;
    }
    throw ConfigError(origin + ": not valid UTF-8 text (line " + std::to_string(line) +
                      "): save the file as UTF-8");
  }
  try {
    return YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    throw ConfigError(origin + ": not valid YAML: " + e.what());
  }
}

// `over` laid on `base`: mappings merge key by key, anything else is replaced.
YAML::Node merged(const YAML::Node& base, const YAML::Node& over) {
  if (!base.IsMap() || !over.IsMap()) return YAML::Clone(over);
  YAML::Node out = YAML::Clone(base);
  for (const auto& entry : over) {
    const std::string key = entry.first.Scalar();
    const YAML::Node mine = out[key];
    out[key] = mine.IsDefined() && mine.IsMap() && entry.second.IsMap() ? merged(mine, entry.second)
                                                                        : YAML::Clone(entry.second);
  }
  return out;
}

PipelineConfig parse_config(const std::string& yaml_text, const std::string& origin) {
  return parse_node(load_yaml(yaml_text, origin), origin, true);
}

namespace {
std::string read_config_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw ConfigError(path + ": is a directory, expected a YAML configuration file");
  std::ifstream in(path);
  if (!in)
    throw ConfigError(path + ": cannot read the configuration file (" + std::strerror(errno) + ")");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}
}  // namespace

PipelineConfig load_config(const std::string& path) {
  return parse_config(read_config_file(path), path);
}

std::vector<PipelineConfig> load_pipelines(const std::string& path) {
  return parse_pipelines(read_config_file(path), path);
}

}  // namespace sluice::app
