// MongoDB (libmongoc): unordered insert_many per batch, write concern configurable
// (majority by default), error 11000 is a duplicate. Identity is either the seed's
// separate unique documentHash index or an _id derived from the hash.
#include <mongoc/mongoc.h>

#include <mutex>

// bson_t carries an alignment attribute that does not matter for pointers to it.
#pragma GCC diagnostic ignored "-Wignored-attributes"

#include "sinks/sink.hpp"

namespace sluice::sinks {
namespace {

std::once_flag mongoc_initialized;

struct BsonDeleter {
  void operator()(bson_t* b) const { bson_destroy(b); }
};
using BsonPtr = std::unique_ptr<bson_t, BsonDeleter>;

class MongoSink final : public Sink {
 public:
  explicit MongoSink(MongoOptions options) : options_(std::move(options)) {
    std::call_once(mongoc_initialized, [] { mongoc_init(); });
  }
  ~MongoSink() override { close(); }

  void open() override {
    close();
    bson_error_t error;
    mongoc_uri_t* uri = mongoc_uri_new_with_error(options_.uri.c_str(), &error);
    if (!uri) throw SinkError("MongoDB URI '" + options_.uri + "': " + error.message);
    client_ = mongoc_client_new_from_uri_with_error(uri, &error);
    mongoc_uri_destroy(uri);
    if (!client_) throw SinkError(std::string("MongoDB client: ") + error.message);
    mongoc_client_set_error_api(client_, MONGOC_ERROR_API_VERSION_2);
    collection_ = mongoc_client_get_collection(client_, options_.database.c_str(),
                                               options_.collection.c_str());
    rejects_ = mongoc_client_get_collection(client_, options_.database.c_str(),
                                            options_.rejects_collection.c_str());
    write_concern_ = mongoc_write_concern_new();
    if (options_.write_concern == "majority")
      mongoc_write_concern_set_wmajority(write_concern_, 0);
    else
      mongoc_write_concern_set_w(write_concern_, std::stoi(options_.write_concern));
    if (!options_.id_from_hash) {
      // The seed's index: db.inventoryEvents.createIndex({documentHash: 1}, {unique: true})
      BsonPtr command(BCON_NEW("createIndexes", BCON_UTF8(options_.collection.c_str()), "indexes",
                               "[", "{", "key", "{", options_.hash_field.c_str(), BCON_INT32(1),
                               "}", "name", BCON_UTF8("uniq_content_hash"), "unique",
                               BCON_BOOL(true), "}", "]"));
      const bool ok = mongoc_collection_write_command_with_opts(collection_, command.get(), nullptr,
                                                                nullptr, &error);
      if (!ok)
        throw SinkError(std::string("MongoDB createIndexes: ") + error.message,
                        drop_connection_if_network(error));
    } else {
      // Still a round trip now, so that an unreachable server fails at start.
      BsonPtr ping(BCON_NEW("ping", BCON_INT32(1)));
      if (!mongoc_client_command_simple(client_, "admin", ping.get(), nullptr, nullptr, &error))
        throw SinkError(std::string("MongoDB ping: ") + error.message,
                        drop_connection_if_network(error));
    }
  }

  std::vector<WriteOutcome> write(std::span<const pipeline::Record> records) override {
    ensure_open();
    std::vector<BsonPtr> owned;
    std::vector<const bson_t*> docs;
    owned.reserve(records.size());
    for (const auto& r : records) {
      bson_error_t error;
      const std::string json = r.document.dump();
      BsonPtr body(bson_new_from_json(reinterpret_cast<const uint8_t*>(json.data()),
                                      static_cast<ssize_t>(json.size()), &error));
      if (!body) throw std::runtime_error(std::string("document to BSON: ") + error.message);
      BsonPtr doc(bson_new());
      if (options_.id_from_hash) {
        bson_oid_t oid;
        const std::string hex = r.hash.substr(r.hash.find(':') + 1, 24);
        bson_oid_init_from_string(&oid, hex.c_str());
        BSON_APPEND_OID(doc.get(), "_id", &oid);
      }
      bson_concat(doc.get(), body.get());
      docs.push_back(doc.get());
      owned.push_back(std::move(doc));
    }
    BsonPtr opts(BCON_NEW("ordered", BCON_BOOL(false)));
    mongoc_write_concern_append(write_concern_, opts.get());
    bson_t reply;
    bson_error_t error;
    const bool ok = mongoc_collection_insert_many(collection_, docs.data(), docs.size(), opts.get(),
                                                  &reply, &error);
    std::vector<WriteOutcome> outcomes(records.size(), WriteOutcome::inserted);
    if (!ok) {
      bool any_write_error = false;
      bson_iter_t it, errors;
      if (bson_iter_init_find(&it, &reply, "writeErrors") && BSON_ITER_HOLDS_ARRAY(&it) &&
          bson_iter_recurse(&it, &errors)) {
        while (bson_iter_next(&errors)) {
          bson_iter_t entry;
          if (!bson_iter_recurse(&errors, &entry)) continue;
          std::int64_t index = -1, code = 0;
          while (bson_iter_next(&entry)) {
            const std::string_view key = bson_iter_key(&entry);
            if (key == "index") index = bson_iter_as_int64(&entry);
            if (key == "code") code = bson_iter_as_int64(&entry);
          }
          if (index < 0 || index >= static_cast<std::int64_t>(records.size())) continue;
          any_write_error = true;
          outcomes[static_cast<std::size_t>(index)] =
              code == 11000 ? WriteOutcome::duplicate : WriteOutcome::failed;
        }
      }
      if (!any_write_error) {
        const std::string message = error.message;
        bson_destroy(&reply);
        const bool unavailable = drop_connection_if_network(error);
        throw SinkError("MongoDB insert_many of " + std::to_string(records.size()) + ": " + message,
                        unavailable);
      }
    }
    bson_destroy(&reply);
    return outcomes;
  }

  void write_rejects(std::span<const RejectRow> rows) override {
    ensure_open();
    for (const auto& row : rows) {
      BsonPtr doc(BCON_NEW("message_id", BCON_UTF8(row.message_id.c_str()), "reason",
                           BCON_UTF8(row.reason.c_str()), "detail", BCON_UTF8(row.detail.c_str()),
                           "body", BCON_UTF8(row.body.c_str()), "source",
                           BCON_UTF8(row.source.c_str())));
      bson_error_t error;
      if (!mongoc_collection_insert_one(rejects_, doc.get(), nullptr, nullptr, &error))
        throw SinkError(std::string("MongoDB insert reject: ") + error.message);
    }
  }

  std::uint64_t count_records() override {
    ensure_open();
    BsonPtr filter(bson_new());
    bson_error_t error;
    const std::int64_t n = mongoc_collection_count_documents(collection_, filter.get(), nullptr,
                                                             nullptr, nullptr, &error);
    if (n < 0) throw SinkError(std::string("MongoDB count: ") + error.message);
    return static_cast<std::uint64_t>(n);
  }

  std::string describe() const override {
    return "mongodb:" + options_.database + "." + options_.collection;
  }

 private:
  void ensure_open() {
    if (!client_) open();
  }
  bool drop_connection_if_network(const bson_error_t& error) {
    const bool network =
        error.domain == MONGOC_ERROR_STREAM || error.domain == MONGOC_ERROR_SERVER_SELECTION;
    if (network) close();
    return network;
  }
  void close() {
    if (write_concern_) mongoc_write_concern_destroy(write_concern_);
    if (collection_) mongoc_collection_destroy(collection_);
    if (rejects_) mongoc_collection_destroy(rejects_);
    if (client_) mongoc_client_destroy(client_);
    write_concern_ = nullptr;
    collection_ = rejects_ = nullptr;
    client_ = nullptr;
  }

  MongoOptions options_;
  mongoc_client_t* client_ = nullptr;
  mongoc_collection_t* collection_ = nullptr;
  mongoc_collection_t* rejects_ = nullptr;
  mongoc_write_concern_t* write_concern_ = nullptr;
};

}  // namespace

std::unique_ptr<Sink> make_mongo_sink(MongoOptions options) {
  return std::make_unique<MongoSink>(std::move(options));
}

}  // namespace sluice::sinks
