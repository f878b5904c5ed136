// The SQLite driver: sink.sqlite.*, one file per pipeline and one writer per file.
#include "sinks/sqlite/driver.hpp"

#include <filesystem>

namespace sluice::sinks {
namespace {
using namespace config;

// One file, however it is written: ./x.db, x.db, a link to it. (weakly_canonical alone
// leaves a relative path relative when nothing of it exists yet.)
std::string canonical_file(const std::string& path) {
  return std::filesystem::weakly_canonical(std::filesystem::absolute(path)).string();
}

std::vector<SinkOption> sqlite_options() {
  using S = SqliteSettings;
  return {
      option<S>(
          "path", "string", "sluice.db", "SQLite database file (WAL mode).",
          [](S& s, auto& n, auto& k) { s.options.path = as_string(n, k); }, "SLUICE_SQLITE_PATH"),
      option<S>("synchronous", "enum: FULL | NORMAL", "FULL",
                "FULL: a commit survives power loss; NORMAL: it survives a process crash.",
                [](S& s, auto& n, auto& k) {
                  s.options.synchronous = as_enum(n, k, {"FULL", "NORMAL"});
                }),
  };
}

class SqliteDriver final : public SinkDriverOf<SqliteSettings> {
 public:
  std::string_view name() const override { return "sqlite"; }
  std::string_view doc() const override {
    return "SQLite, the embedded default: one file in WAL mode, one transaction per batch, "
           "one writer per file (a larger `sink.writers` is lowered to 1), one pipeline per "
           "file.";
  }
  const std::vector<SinkOption>& options() const override {
    static const auto rows = sqlite_options();
    return rows;
  }
  void finalize(SinkSettings& settings, SinkPipeline& pipeline) const override {
    auto& o = of(settings).options;
    o.table = pipeline.table;
    o.rejects_table = pipeline.rejects_table;
    o.routes = pipeline.routes;
    pipeline.writers = 1;  // one writer per file
  }
  Factory factory(const SinkSettings& settings) const override {
    return [o = of(settings).options] { return make_sqlite_sink(o); };
  }
  std::string_view db_system() const override { return "sqlite"; }
  std::string describe(const SinkSettings& settings) const override {
    return "sqlite " + of(settings).options.path;
  }
  std::string rejects_place(const SinkSettings& settings) const override {
    const auto& o = of(settings).options;
    return canonical_file(o.path) + " " + o.rejects_table;
  }
  std::optional<Exclusive> exclusive(const SinkSettings& settings) const override {
    const auto& path = of(settings).options.path;
    return Exclusive{"sink.sqlite.path", path, canonical_file(path),
                     "SQLite file (one writer each)"};
  }
  std::string missing_database(const SinkSettings& settings) const override {
    const auto& path = of(settings).options.path;
    return std::filesystem::exists(path)
               ? std::string()
               : "sink.sqlite.path: " + path + ": no such database (has the pipeline run here?)";
  }
};

}  // namespace

const SinkDriver& sqlite_sink_driver() {
  static const SqliteDriver driver;
  return driver;
}

}  // namespace sluice::sinks
