// The PostgreSQL driver: sink.postgres.*, typed columns checked against the
// normalized fields they copy.
#include "sinks/postgres/driver.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <stdexcept>

namespace sluice::sinks {
namespace {
using namespace config;
using std::chrono::milliseconds;
using std::chrono::seconds;

std::vector<SinkOption> postgres_options() {
  using S = PostgresSettings;
  return {
      option<S>(
          "dsn", "string", "", "libpq connection string (required for postgres).",
          [](S& s, auto& n, auto& k) { s.options.dsn = as_string(n, k); }, "SLUICE_POSTGRES_DSN",
          true),
      option<S>("connect_timeout", "duration", "5s",
                "Longest wait for a new connection to PostgreSQL (connect, TLS, "
                "authentication); then the attempt fails and is made again later.",
                [](S& s, auto& n, auto& k) {
                  s.options.connect_timeout = as_duration(n, k, milliseconds(100), seconds(300));
                }),
      option<S>("query_timeout", "duration", "30s",
                "Longest wait for PostgreSQL to answer one call (a frozen server or network): "
                "then the connection is dropped and the batch tried again on a new one. Also "
                "the server's statement_timeout.",
                [](S& s, auto& n, auto& k) {
                  s.options.query_timeout = as_duration(n, k, milliseconds(100), seconds(3600));
                }),
      option<S>("columns", "list of strings", "",
                "Normalized fields also written as typed columns beside the JSONB document.",
                [](S& s, auto& n, auto& k) {
                  s.options.columns.clear();
                  for (const auto& name : as_string_list(n, k))
                    s.options.columns.push_back({name, pipeline::FieldType::string});
                }),
  };
}

// Each column takes the type of its field (a timestamp's output too) and a name of its
// own in the table.
void type_columns(std::vector<Column>& columns, const SinkPipeline& pipeline) {
  const std::string key = "sink.postgres.columns";
  std::map<std::string, std::string> column_of = {
      {"hash", ""}, {"message_id", ""}, {"document", ""}, {"written_at", ""}};
  for (auto& column : columns) {
    const auto field = pipeline.field(key, column.field);
    column.type = field.type;
    column.epoch_ms = field.epoch_ms;
    // Its column's name: the dots as underscores (customer.id -> customer_id).
    std::string name = column.field;
    std::replace(name.begin(), name.end(), '.', '_');
    const auto [it, fresh] = column_of.emplace(name, column.field);
    if (!fresh)
      throw ConfigError(key + ": '" + column.field + "' would be the column " + name + ", which " +
                        (it->second.empty() ? std::string("the table has already")
                                            : "'" + it->second + "' is too") +
                        ": leave one out");
  }
}

class PostgresDriver final : public SinkDriverOf<PostgresSettings> {
 public:
  std::string_view name() const override { return "postgres"; }
  std::string_view doc() const override {
    return "PostgreSQL: the document as JSONB, chosen fields as typed columns beside it, one "
           "INSERT ... SELECT FROM unnest ... ON CONFLICT DO NOTHING per batch, a connection per "
           "writer.";
  }
  const std::vector<SinkOption>& options() const override {
    static const auto rows = postgres_options();
    return rows;
  }
  void finalize(SinkSettings& settings, SinkPipeline& pipeline) const override {
    auto& o = of(settings).options;
    if (o.dsn.empty())
      throw ConfigError(
          "sink.postgres.dsn: missing, expected a libpq connection string (sink.type is "
          "postgres)");
    o.table = pipeline.table;
    o.rejects_table = pipeline.rejects_table;
    o.routes = pipeline.routes;
    type_columns(o.columns, pipeline);
  }
  Factory factory(const SinkSettings& settings) const override {
    return [o = of(settings).options] { return make_postgres_sink(o); };
  }
  Factory quick_factory(const SinkSettings& settings, milliseconds budget) const override {
    auto o = of(settings).options;
    o.connect_timeout = o.query_timeout = std::clamp(budget, milliseconds(100), milliseconds(1000));
    return [o] { return make_postgres_sink(o); };
  }
  std::string_view db_system() const override { return "postgresql"; }
  std::string describe(const SinkSettings& settings) const override {
    return "postgres table " + of(settings).options.table;
  }
  std::string rejects_place(const SinkSettings& settings) const override {
    const auto& o = of(settings).options;
    return o.dsn + " " + o.rejects_table;
  }
};

}  // namespace

const SinkDriver& postgres_sink_driver() {
  static const PostgresDriver driver;
  return driver;
}

}  // namespace sluice::sinks
