// The MongoDB driver: sink.mongodb.*, for MongoDB and the servers that speak its wire
// protocol.
#include "sinks/mongodb/driver.hpp"

namespace sluice::sinks {
namespace {
using namespace config;

std::vector<SinkOption> mongo_options() {
  using S = MongoSettings;
  return {
      option<S>(
          "uri", "string", "", "MongoDB connection URI (required for mongodb).",
          [](S& s, auto& n, auto& k) { s.options.uri = as_string(n, k); }, "SLUICE_MONGODB_URI",
          true),
      option<S>("database", "string", "sluice", "MongoDB database.",
                [](S& s, auto& n, auto& k) { s.options.database = as_string(n, k); }),
      option<S>("write_concern", "string", "majority",
                "majority, or a number of acknowledging nodes (1 or more; unacknowledged writes "
                "are refused).",
                [](S& s, auto& n, auto& k) {
                  const std::string w = as_string(n, k);
                  // w: 0 (unacknowledged) is refused: we would ack what the server may not
                  // have.
                  if (w != "majority") {
                    try {
                      as_int(n, k, 1, 50);
                    } catch (const ConfigError&) {
                      bad(k, n,
                          "\"majority\" or a number of nodes from 1 to 50 (0, unacknowledged, "
                          "is refused)");
                    }
                  }
                  s.options.write_concern = w;
                }),
      option<S>("id_from_hash", "boolean", "true",
                "Identity in _id, derived from the hash: every MongoDB-compatible server "
                "(DocumentDB, Cosmos DB too) enforces _id's uniqueness. false: a separate unique "
                "index on identity.field, created at start (the test server lists it but does "
                "not enforce it, so only a real MongoDB proves that mode end to end).",
                [](S& s, auto& n, auto& k) { s.options.id_from_hash = as_bool(n, k); }),
      option<S>("typed_values", "boolean", "true",
                "Exact decimals stored as Decimal128 and timestamps as BSON dates (UTC "
                "milliseconds; finer digits cut), so that $sum, $gt and date ranges work as "
                "MongoDB users expect; a decimal beyond Decimal128's 34 digits is refused "
                "(sink_refused), never rounded. A field whose type differs between payload "
                "versions stays text. false: the canonical text, as earlier releases "
                "stored them (a collection holding both needs queries that read both).",
                [](S& s, auto& n, auto& k) { s.typed_values = as_bool(n, k); }),
  };
}

class MongoDriver final : public SinkDriverOf<MongoSettings> {
 public:
  std::string_view name() const override { return "mongodb"; }
  std::string_view doc() const override {
    return "MongoDB and the servers that speak its wire protocol: one unordered insertMany "
           "per batch, the identity in _id (or a unique index), a client per writer.";
  }
  const std::vector<SinkOption>& options() const override {
    static const auto rows = mongo_options();
    return rows;
  }
  void finalize(SinkSettings& settings, SinkPipeline& pipeline) const override {
    auto& o = of(settings).options;
    if (o.uri.empty())
      throw ConfigError(
          "sink.mongodb.uri: missing, expected a mongodb:// URI (sink.type is mongodb)");
    o.collection = pipeline.table;
    o.rejects_collection = pipeline.rejects_table;
    o.routes = pipeline.routes;
    o.hash_field = pipeline.hash_field;
    o.typed_fields.clear();
    if (!of(settings).typed_values) return;
    for (const auto& [name, info] : pipeline.fields) {
      if (info.type != pipeline::FieldType::decimal && info.type != pipeline::FieldType::timestamp)
        continue;
      TypedField field;
      for (std::size_t from = 0;;) {
        const auto dot = name.find('.', from);
        field.path.push_back(name.substr(from, dot - from));
        if (dot == std::string::npos) break;
        from = dot + 1;
      }
      field.type = info.type;
      field.epoch_ms = info.epoch_ms;
      o.typed_fields.push_back(std::move(field));
    }
  }
  Factory factory(const SinkSettings& settings) const override {
    return [o = of(settings).options] { return make_mongo_sink(o); };
  }
  std::string_view db_system() const override { return "mongodb"; }
  std::string describe(const SinkSettings& settings) const override {
    const auto& o = of(settings).options;
    return "mongodb " + o.database + "." + o.collection;
  }
  std::string rejects_place(const SinkSettings& settings) const override {
    const auto& o = of(settings).options;
    return o.uri + " " + o.database + " " + o.rejects_collection;
  }
};

}  // namespace

const SinkDriver& mongodb_sink_driver() {
  static const MongoDriver driver;
  return driver;
}

}  // namespace sluice::sinks
