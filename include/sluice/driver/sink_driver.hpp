#pragma once
// A sink driver: everything `sluice run`, `sluice config` and `sluice rejects` need of
// one kind of database, in one object, as a source driver is for a queue
// (sluice/driver/source_driver.hpp). The application iterates the registered sink
// drivers (registered_sink_drivers(): the built-in ones, then those a distribution adds
// with sluice_add_distribution) and never names a database.
//
// A driver gives:
//  - its configuration section, sink.<name>.*: option rows (docs generated from them)
//    and a finalize step for the rules that span its keys and the pipeline's (a key it
//    requires, typed columns checked against the normalized fields);
//  - the factory of its Sink (sluice/driver/sink.hpp), which keeps everything of a pipeline's in
//    one database: the records, the rejects table (`sluice rejects` reads and replays
//    it through the sink) and the positions of the sources that read a log;
//  - how it is named in logs, the run's summary, `sluice config check` and spans.

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sluice/driver/option.hpp"
#include "sluice/driver/record.hpp"
#include "sluice/driver/sink.hpp"
#include "sluice/driver/value.hpp"

namespace sluice::sinks {

// A driver's own settings (its section of the file), made and read by the driver.
struct SinkSettings {
  virtual ~SinkSettings() = default;
};
using SinkOption = config::Option<SinkSettings>;

template <class Settings>
SinkOption option(std::string key, std::string type, std::string default_value, std::string doc,
                  std::function<void(Settings&, const config::Value&, const std::string&)> apply,
                  std::string env = {}, bool secret = false) {
  return config::option_of<SinkSettings, Settings>(std::move(key), std::move(type),
                                                   std::move(default_value), std::move(doc),
                                                   std::move(apply), std::move(env), secret);
}

// A normalized field as every version of the payload has it (sink.postgres.columns).
struct FieldInfo {
  pipeline::FieldType type = pipeline::FieldType::string;
  bool epoch_ms = false;  // a timestamp written as epoch milliseconds
};

// What the pipeline decides for every sink, which a driver's finalize takes over into
// its settings and may check its own keys against.
struct SinkPipeline {
  std::string hash_field;           // identity.field: the document's hash field
  std::string table;                // sink.table
  std::string rejects_table;        // sink.rejects_table
  std::vector<std::string> routes;  // route.tables' tables, for Record::route 1, 2, ...
  int& writers;                     // sink.writers: a driver may lower it
  // The normalized field `name`, of one type (and one timestamp output) in every
  // version; throws config::ConfigError naming `key` when it is not.
  std::function<FieldInfo(const std::string& key, const std::string& name)> field;
  // Every normalized field, by name ("customer.id"), with its type wherever a version has
  // it; a field whose type (or timestamp output) differs between versions is left out.
  std::vector<std::pair<std::string, FieldInfo>> fields;
};

class SinkDriver {
 public:
  using SettingsBase = SinkSettings;  // what its settings derive from
  using Factory = std::function<std::unique_ptr<Sink>()>;
  static constexpr std::string_view kSection = "sink";  // its keys: sink.<name>.*
  virtual ~SinkDriver() = default;

  // The value of sink.type, and the section of its keys (sink.<name>.*).
  virtual std::string_view name() const = 0;
  virtual std::string_view doc() const = 0;  // one paragraph for docs/configuration.md
  // Its options, keys relative to its section ("path" for sink.sqlite.path).
  virtual const std::vector<SinkOption>& options() const = 0;
  // Keys of earlier releases it still reads, with a warning naming the new key.
  virtual std::vector<std::pair<std::string, std::string>> renamed_keys() const { return {}; }
  virtual std::unique_ptr<SinkSettings> make_settings() const = 0;
  // Takes the pipeline's part over and checks the rules that span its keys and the
  // pipeline's; throws config::ConfigError naming the keys.
  virtual void finalize(SinkSettings& settings, SinkPipeline& pipeline) const = 0;

  virtual Factory factory(const SinkSettings& settings) const = 0;
  // The same, waiting at most about `budget` for its database at any step (the count of
  // records in the run's summary, which must not hold the stop).
  virtual Factory quick_factory(const SinkSettings& settings,
                                std::chrono::milliseconds /*budget*/) const {
    return factory(settings);
  }

  // OpenTelemetry's db.system for its spans: "sqlite", "postgresql", "mongodb".
  virtual std::string_view db_system() const = 0;
  // Where the records go, for logs, the summary and `sluice config check`; never a
  // secret ("sqlite sluice.db", "postgres table records").
  virtual std::string describe(const SinkSettings& settings) const = 0;
  // The rejects table's place (its database and table): pipelines whose places are
  // equal share one rejects table. Compared only, never shown (it may hold a secret).
  virtual std::string rejects_place(const SinkSettings& settings) const = 0;
  // What only one pipeline of a process may write (SQLite: its file, one writer): the
  // key that names it, the value as given, its canonical form and what it is.
  struct Exclusive {
    std::string key;
    std::string shown;
    std::string canonical;
    std::string what;  // "SQLite file (one writer each)"
  };
  virtual std::optional<Exclusive> exclusive(const SinkSettings& /*settings*/) const {
    return std::nullopt;
  }
  // Before reading what a run left (`sluice rejects`): why the database cannot be there,
  // naming the key (SQLite: no such file); empty: it may be.
  virtual std::string missing_database(const SinkSettings& /*settings*/) const { return {}; }
};

// What every driver of settings type `Settings` has alike.
template <class Settings>
class SinkDriverOf : public SinkDriver {
 public:
  std::unique_ptr<SinkSettings> make_settings() const override {
    return std::make_unique<Settings>();
  }

 protected:
  static const Settings& of(const SinkSettings& s) { return static_cast<const Settings&>(s); }
  static Settings& of(SinkSettings& s) { return static_cast<Settings&>(s); }
};

// The binary's sink drivers (its generated registry), in registration order.
const std::vector<const SinkDriver*>& registered_sink_drivers();
// The driver whose name() is `name`; nullptr if none.
const SinkDriver* find_sink_driver(std::string_view name);

}  // namespace sluice::sinks
