// MongoDB (libmongoc): unordered insert_many per batch, write concern configurable
// (majority by default), error 11000 is a duplicate. Identity is an _id derived from the
// hash (the default) or a separate unique index on the hash field.
#include <mongoc/mongoc.h>

#include <mutex>
#include <string_view>

// bson_t carries an alignment attribute that does not matter for pointers to it.
#pragma GCC diagnostic ignored "-Wignored-attributes"

#include "common/redact.hpp"
#include "sinks/sink.hpp"

namespace sluice::sinks {
namespace {

// The one place where MongoDB's write error codes are sorted (error_codes.yml): the
// codes that mean "this document, every time" are refused; any other code, known or
// not, may pass when tried again (shutdown, stepdown, stale routing, interruption,
// disk full, throttling, ...): the record is nacked and comes back.
bool refused_code(std::int64_t code) {
  switch (code) {
    case 2:      // BadValue
    case 9:      // FailedToParse
    case 14:     // TypeMismatch
    case 22:     // InvalidBSON
    case 52:     // DollarPrefixedFieldName
    case 53:     // InvalidIdField
    case 54:     // NotSingleValueField
    case 55:     // InvalidDBRef
    case 56:     // EmptyFieldName
    case 57:     // DottedFieldName
    case 66:     // ImmutableField
    case 121:    // DocumentValidationFailure
    case 10334:  // BSONObjectTooLarge
    case 17280:  // KeyTooLong
    case 17419:  // a document grown past the maximum size
      return true;
    default:
      return false;
  }
}

std::string string_field(const bson_iter_t& parent, std::string_view name) {
  bson_iter_t it = parent;
  while (bson_iter_next(&it))
    if (bson_iter_key(&it) == name && BSON_ITER_HOLDS_UTF8(&it))
      return bson_iter_utf8(&it, nullptr);
  return {};
}

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
    if (!uri)
      throw scrubbed("MongoDB URI '" + common::redact_password(options_.uri) +
                     "': " + error.message);
    // Bound every call unless the URI says otherwise (the driver's default is 5 minutes).
    if (!mongoc_uri_has_option(uri, MONGOC_URI_SOCKETTIMEOUTMS))
      mongoc_uri_set_option_as_int32(uri, MONGOC_URI_SOCKETTIMEOUTMS, 30000);
    client_ = mongoc_client_new_from_uri_with_error(uri, &error);
    mongoc_uri_destroy(uri);
    if (!client_) throw scrubbed(std::string("MongoDB client: ") + error.message);
    mongoc_client_set_error_api(client_, MONGOC_ERROR_API_VERSION_2);
    collection_ = mongoc_client_get_collection(client_, options_.database.c_str(),
                                               options_.collection.c_str());
    rejects_ = mongoc_client_get_collection(client_, options_.database.c_str(),
                                            options_.rejects_collection.c_str());
    write_concern_ = mongoc_write_concern_new();
    if (options_.write_concern == "majority") {
      mongoc_write_concern_set_wmajority(write_concern_, 0);
    } else {
      // An unacknowledged write (w: 0) would let us ack what the server may not have.
      int w = 0;
      try {
        w = std::stoi(options_.write_concern);
      } catch (const std::exception&) {
      }
      if (w < 1)
        throw scrubbed("MongoDB write concern '" + options_.write_concern +
                           "': expected \"majority\" or a number of at least 1 (w: 0 would "
                           "ack writes the server may not have)",
                       SinkFailure::refused);
      mongoc_write_concern_set_w(write_concern_, w);
    }
    if (!options_.id_from_hash) {
      // db.COLLECTION.createIndex({documentHash: 1}, {unique: true})
      BsonPtr command(BCON_NEW("createIndexes", BCON_UTF8(options_.collection.c_str()), "indexes",
                               "[", "{", "key", "{", options_.hash_field.c_str(), BCON_INT32(1),
                               "}", "name", BCON_UTF8("uniq_content_hash"), "unique",
                               BCON_BOOL(true), "}", "]"));
      const bool ok = mongoc_collection_write_command_with_opts(collection_, command.get(), nullptr,
                                                                nullptr, &error);
      if (!ok)
        throw scrubbed(std::string("MongoDB createIndexes: ") + error.message, failure_of(error));
    } else {
      // Still a round trip now, so that an unreachable server fails at start.
      BsonPtr ping(BCON_NEW("ping", BCON_INT32(1)));
      if (!mongoc_client_command_simple(client_, "admin", ping.get(), nullptr, nullptr, &error))
        throw scrubbed(std::string("MongoDB ping: ") + error.message, failure_of(error));
    }
  }

  WriteResult write(std::span<const pipeline::Record> records) override {
    ensure_open();
    WriteResult result;
    result.outcomes.assign(records.size(), WriteOutcome::inserted);
    std::vector<BsonPtr> owned;
    std::vector<const bson_t*> docs;
    std::vector<std::size_t> record_of;  // docs[i] is records[record_of[i]]
    owned.reserve(records.size());
    for (std::size_t i = 0; i < records.size(); ++i) {
      const auto& r = records[i];
      bson_error_t error;
      const std::string json = r.document.dump();
      BsonPtr body(bson_new_from_json(reinterpret_cast<const uint8_t*>(json.data()),
                                      static_cast<ssize_t>(json.size()), &error));
      if (!body) {  // this document, every time
        result.outcomes[i] = WriteOutcome::refused;
        result.reasons.emplace_back(i, std::string("document to BSON: ") + error.message);
        continue;
      }
      BsonPtr doc(bson_new());
      if (options_.id_from_hash) {
        bson_oid_t oid;
        const std::string hex = r.hash.substr(r.hash.find(':') + 1, 24);
        bson_oid_init_from_string(&oid, hex.c_str());
        BSON_APPEND_OID(doc.get(), "_id", &oid);
      }
      bson_concat(doc.get(), body.get());
      docs.push_back(doc.get());
      record_of.push_back(i);
      owned.push_back(std::move(doc));
    }
    if (docs.empty()) return result;
    BsonPtr opts(BCON_NEW("ordered", BCON_BOOL(false)));
    mongoc_write_concern_append(write_concern_, opts.get());
    bson_t reply;
    bson_error_t error;
    const bool ok = mongoc_collection_insert_many(collection_, docs.data(), docs.size(), opts.get(),
                                                  &reply, &error);
    bool any_reply = false;
    bson_iter_t it, entries;
    if (bson_iter_init_find(&it, &reply, "writeErrors") && BSON_ITER_HOLDS_ARRAY(&it) &&
        bson_iter_recurse(&it, &entries)) {
      while (bson_iter_next(&entries)) {
        bson_iter_t entry;
        if (!bson_iter_recurse(&entries, &entry)) continue;
        std::int64_t index = -1, code = 0;
        for (bson_iter_t field = entry; bson_iter_next(&field);) {
          const std::string_view key = bson_iter_key(&field);
          if (key == "index") index = bson_iter_as_int64(&field);
          if (key == "code") code = bson_iter_as_int64(&field);
        }
        if (index < 0 || index >= static_cast<std::int64_t>(docs.size())) continue;
        any_reply = true;
        const std::size_t i = record_of[static_cast<std::size_t>(index)];
        if (code == 11000) {
          result.outcomes[i] = WriteOutcome::duplicate;
          continue;
        }
        result.outcomes[i] = refused_code(code) ? WriteOutcome::refused : WriteOutcome::failed;
        result.reasons.emplace_back(
            i, "MongoDB error " + std::to_string(code) + ": " + string_field(entry, "errmsg"));
      }
    }
    // A write concern not met: what was written may yet be rolled back. Nothing that
    // seemed written (or already there) is acked; those records come back later.
    if (bson_iter_init_find(&it, &reply, "writeConcernErrors") && BSON_ITER_HOLDS_ARRAY(&it) &&
        bson_iter_recurse(&it, &entries) && bson_iter_next(&entries)) {
      any_reply = true;
      std::string why = "write concern not met";
      bson_iter_t entry;
      if (bson_iter_recurse(&entries, &entry)) why += ": " + string_field(entry, "errmsg");
      for (std::size_t i = 0; i < result.outcomes.size(); ++i) {
        if (result.outcomes[i] != WriteOutcome::inserted &&
            result.outcomes[i] != WriteOutcome::duplicate)
          continue;
        result.outcomes[i] = WriteOutcome::failed;
        result.reasons.emplace_back(i, why);
      }
    }
    if (!ok && !any_reply) {
      const std::string message = error.message;
      bson_destroy(&reply);
      const bool network = drop_connection_if_network(error);
      throw scrubbed("MongoDB insert_many of " + std::to_string(records.size()) + ": " + message,
                     network ? SinkFailure::unavailable : SinkFailure::transient);
    }
    bson_destroy(&reply);
    return result;
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
        throw scrubbed(std::string("MongoDB insert reject: ") + error.message);
    }
  }

  std::uint64_t count_records() override {
    ensure_open();
    BsonPtr filter(bson_new());
    bson_error_t error;
    const std::int64_t n = mongoc_collection_count_documents(collection_, filter.get(), nullptr,
                                                             nullptr, nullptr, &error);
    if (n < 0) throw scrubbed(std::string("MongoDB count: ") + error.message);
    return static_cast<std::uint64_t>(n);
  }

  std::string describe() const override {
    return "mongodb:" + options_.database + "." + options_.collection;
  }

 private:
  // Every error the sink throws: a driver's message can quote the URI, or a piece of
  // an unencoded password.
  SinkError scrubbed(const std::string& message, SinkFailure kind = SinkFailure::transient) const {
    return SinkError(common::redact_secret(message, options_.uri), kind);
  }
  void ensure_open() {
    if (!client_) open();
  }
  SinkFailure failure_of(const bson_error_t& error) {
    return drop_connection_if_network(error) ? SinkFailure::unavailable : SinkFailure::transient;
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
