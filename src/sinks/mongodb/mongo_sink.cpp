// MongoDB (libmongoc): unordered insert_many per batch, write concern configurable
// (majority by default), error 11000 is a duplicate. Identity is an _id derived from the
// hash (the default) or a separate unique index on the hash field.
#include <mongoc/mongoc.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <string_view>

// bson_t carries an alignment attribute that does not matter for pointers to it.
#pragma GCC diagnostic ignored "-Wignored-attributes"

#include "common/crypto.hpp"
#include "common/redact.hpp"
#include "sinks/mongodb/mongo_sink.hpp"

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

// Milliseconds since the epoch as RFC 3339 in UTC, as the SQL sinks write it.
std::string utc_text(std::int64_t ms) {
  const std::time_t seconds = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char text[96];  // room for any int the format could print
  std::snprintf(text, sizeof text, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(ms % 1000));
  return text;
}

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
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
    names_.push_back(options_.collection);
    names_.insert(names_.end(), options_.routes.begin(), options_.routes.end());
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
    for (const auto& name : names_)
      collections_.push_back(
          mongoc_client_get_collection(client_, options_.database.c_str(), name.c_str()));
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
      for (std::size_t k = 0; k < names_.size(); ++k) {
        // db.COLLECTION.createIndex({documentHash: 1}, {unique: true})
        BsonPtr command(BCON_NEW("createIndexes", BCON_UTF8(names_[k].c_str()), "indexes", "[", "{",
                                 "key", "{", options_.hash_field.c_str(), BCON_INT32(1), "}",
                                 "name", BCON_UTF8("uniq_content_hash"), "unique", BCON_BOOL(true),
                                 "}", "]"));
        const bool ok = mongoc_collection_write_command_with_opts(collections_[k], command.get(),
                                                                  nullptr, nullptr, &error);
        if (!ok)
          throw scrubbed("MongoDB createIndexes on " + names_[k] + ": " + error.message,
                         failure_of(error));
      }
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
    // Per collection (Record::route): the documents and the record each one is.
    std::vector<Batch> batches(collections_.size());
    for (std::size_t i = 0; i < records.size(); ++i) {
      const auto& r = records[i];
      BsonPtr doc(bson_new());
      if (options_.id_from_hash) {
        bson_oid_t oid;
        const std::string hex = r.hash.substr(r.hash.find(':') + 1, 24);
        bson_oid_init_from_string(&oid, hex.c_str());
        BSON_APPEND_OID(doc.get(), "_id", &oid);
      }
      if (std::string why; !append_document(doc.get(), r.document, options_.typed_fields, why)) {
        result.outcomes[i] = WriteOutcome::refused;  // this document, every time
        result.reasons.emplace_back(i, "document to BSON: " + why);
        continue;
      }
      auto& batch = batches.at(r.route);
      batch.docs.push_back(doc.get());
      batch.record_of.push_back(i);
      batch.owned.push_back(std::move(doc));
    }
    for (std::size_t k = 0; k < batches.size(); ++k)
      if (!batches[k].docs.empty()) insert(k, batches[k], result);
    return result;
  }

  struct Batch {
    std::vector<BsonPtr> owned;
    std::vector<const bson_t*> docs;
    std::vector<std::size_t> record_of;  // docs[i] is records[record_of[i]]
  };

  // One unordered insert_many into collection k; each record's outcome into `result`.
  void insert(std::size_t k, Batch& batch, WriteResult& result) {
    auto& docs = batch.docs;
    const auto& record_of = batch.record_of;
    BsonPtr opts(BCON_NEW("ordered", BCON_BOOL(false)));
    mongoc_write_concern_append(write_concern_, opts.get());
    bson_t reply;
    bson_error_t error;
    const bool ok = mongoc_collection_insert_many(collections_[k], docs.data(), docs.size(),
                                                  opts.get(), &reply, &error);
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
      for (const std::size_t i : record_of) {
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
      throw scrubbed("MongoDB insert_many of " + std::to_string(docs.size()) + " into " +
                         names_[k] + ": " + message,
                     network ? SinkFailure::unavailable : SinkFailure::transient);
    }
    bson_destroy(&reply);
  }

  void write_rejects(std::span<const RejectRow> rows) override {
    ensure_open();
    if (!rejects_indexed_) {
      // A plain index on message_id for the upsert's lookup (not unique: documents of
      // earlier releases may repeat one); creating one that exists is a no-op.
      rejects_indexed_ = true;
      BsonPtr command(BCON_NEW("createIndexes", BCON_UTF8(options_.rejects_collection.c_str()),
                               "indexes", "[", "{", "key", "{", "message_id", BCON_INT32(1), "}",
                               "name", BCON_UTF8("message_id"), "}", "]"));
      bson_error_t error;
      if (!mongoc_collection_write_command_with_opts(rejects_, command.get(), nullptr, nullptr,
                                                     &error))
        throw scrubbed(
            "MongoDB createIndexes on " + options_.rejects_collection + ": " + error.message,
            failure_of(error));
    }
    for (const auto& row : rows) {
      BsonPtr doc(BCON_NEW("message_id", BCON_UTF8(row.message_id.c_str()), "reason",
                           BCON_UTF8(row.reason.c_str()), "detail", BCON_UTF8(row.detail.c_str()),
                           "body", BCON_UTF8(row.body.c_str()), "source",
                           BCON_UTF8(row.source.c_str()), "rejected_at", BCON_DATE_TIME(now_ms())));
      if (!row.properties.empty())
        BSON_APPEND_UTF8(doc.get(), "properties", row.properties.c_str());
      BSON_APPEND_UTF8(doc.get(), "pipeline", row.pipeline.c_str());
      const std::string body_sha256 = crypto::sha256_hex(row.body);
      BSON_APPEND_UTF8(doc.get(), "body_sha256", body_sha256.c_str());
      bson_error_t error;
      BsonPtr concern(bson_new());  // the sink's write concern, as for records
      mongoc_write_concern_append(write_concern_, concern.get());
      if (row.message_id.empty()) {
        if (!mongoc_collection_insert_one(rejects_, doc.get(), concern.get(), nullptr, &error))
          throw scrubbed(std::string("MongoDB insert reject: ") + error.message);
        continue;
      }
      // One document per message, reason and pipeline: written only if none is there
      // (an upsert, not a unique index: documents of earlier releases, without a
      // pipeline, may repeat one and would stop the index being made).
      BsonPtr filter(BCON_NEW("message_id", BCON_UTF8(row.message_id.c_str()), "reason",
                              BCON_UTF8(row.reason.c_str()), "pipeline",
                              BCON_UTF8(row.pipeline.c_str()), "body_sha256",
                              BCON_UTF8(body_sha256.c_str())));
      bson_t update = BSON_INITIALIZER;
      BSON_APPEND_DOCUMENT(&update, "$setOnInsert", doc.get());
      BsonPtr opts(BCON_NEW("upsert", BCON_BOOL(true)));
      mongoc_write_concern_append(write_concern_, opts.get());
      const bool written = mongoc_collection_update_one(rejects_, filter.get(), &update, opts.get(),
                                                        nullptr, &error);
      bson_destroy(&update);
      if (!written) throw scrubbed(std::string("MongoDB insert reject: ") + error.message);
    }
  }

  std::vector<StoredReject> read_rejects(const RejectQuery& query) override {
    ensure_open();
    BsonPtr filter(bson_new());
    if (!query.after_id.empty()) {
      bson_oid_t after;
      bson_oid_init_from_string(&after, query.after_id.c_str());
      BSON_APPEND_DOCUMENT(filter.get(), "_id", BsonPtr(BCON_NEW("$gt", BCON_OID(&after))).get());
    }
    if (!query.reason.empty()) BSON_APPEND_UTF8(filter.get(), "reason", query.reason.c_str());
    if (!query.pipeline.empty()) BSON_APPEND_UTF8(filter.get(), "pipeline", query.pipeline.c_str());
    if (!query.replayed)  // replayed_at absent (or null: both match {replayed_at: null})
      BSON_APPEND_NULL(filter.get(), "replayed_at");
    BsonPtr opts(BCON_NEW("sort", "{", "_id", BCON_INT32(1), "}", "limit",
                          BCON_INT64(static_cast<std::int64_t>(query.limit))));
    mongoc_cursor_t* cursor =
        mongoc_collection_find_with_opts(rejects_, filter.get(), opts.get(), nullptr);
    std::vector<StoredReject> rows;
    const bson_t* doc = nullptr;
    while (mongoc_cursor_next(cursor, &doc)) {
      StoredReject r;
      bson_iter_t it;
      if (bson_iter_init(&it, doc)) {
        r.row = {string_field(it, "message_id"), string_field(it, "reason"),
                 string_field(it, "detail"),     string_field(it, "body"),
                 string_field(it, "source"),     string_field(it, "properties"),
                 string_field(it, "pipeline")};
        while (bson_iter_next(&it)) {
          const std::string_view key = bson_iter_key(&it);
          if (key == "_id" && BSON_ITER_HOLDS_OID(&it)) {
            char hex[25];
            bson_oid_to_string(bson_iter_oid(&it), hex);
            r.id = hex;
            if (r.rejected_at.empty())  // a row of an earlier release: the id's time
              r.rejected_at = utc_text(bson_oid_get_time_t(bson_iter_oid(&it)) * 1000LL);
          } else if (key == "rejected_at" && BSON_ITER_HOLDS_DATE_TIME(&it)) {
            r.rejected_at = utc_text(bson_iter_date_time(&it));
          } else if (key == "replayed_at" && BSON_ITER_HOLDS_DATE_TIME(&it)) {
            r.replayed_at = utc_text(bson_iter_date_time(&it));
          }
        }
      }
      rows.push_back(std::move(r));
    }
    bson_error_t error;
    const bool failed = mongoc_cursor_error(cursor, &error);
    mongoc_cursor_destroy(cursor);
    if (failed)
      throw scrubbed(std::string("MongoDB read rejects: ") + error.message, failure_of(error));
    return rows;
  }

  void mark_replayed(std::span<const std::string> ids) override {
    ensure_open();
    if (ids.empty()) return;
    BsonPtr list(bson_new());
    for (std::size_t i = 0; i < ids.size(); ++i) {
      bson_oid_t oid;
      bson_oid_init_from_string(&oid, ids[i].c_str());
      const std::string index = std::to_string(i);
      BSON_APPEND_OID(list.get(), index.c_str(), &oid);
    }
    BsonPtr filter(bson_new());
    BsonPtr in(bson_new());
    BSON_APPEND_ARRAY(in.get(), "$in", list.get());
    BSON_APPEND_DOCUMENT(filter.get(), "_id", in.get());
    BsonPtr update(BCON_NEW("$set", "{", "replayed_at", BCON_DATE_TIME(now_ms()), "}"));
    bson_error_t error;
    if (!mongoc_collection_update_many(rejects_, filter.get(), update.get(), nullptr, nullptr,
                                       &error))
      throw scrubbed(std::string("MongoDB mark replayed: ") + error.message, failure_of(error));
  }

  std::uint64_t count_records() override {
    ensure_open();
    BsonPtr filter(bson_new());
    bson_error_t error;
    std::uint64_t total = 0;
    for (auto* collection : collections_) {
      const std::int64_t n = mongoc_collection_count_documents(collection, filter.get(), nullptr,
                                                               nullptr, nullptr, &error);
      if (n < 0) throw scrubbed(std::string("MongoDB count: ") + error.message);
      total += static_cast<std::uint64_t>(n);
    }
    return total;
  }

  std::optional<std::string> load_position(const std::string& key) override {
    ensure_open();
    BsonPtr filter(BCON_NEW("_id", BCON_UTF8(key.c_str())));
    mongoc_collection_t* positions =
        mongoc_client_get_collection(client_, options_.database.c_str(), "sluice_positions");
    mongoc_cursor_t* cursor =
        mongoc_collection_find_with_opts(positions, filter.get(), nullptr, nullptr);
    const bson_t* doc = nullptr;
    std::optional<std::string> value;
    if (mongoc_cursor_next(cursor, &doc)) {
      bson_iter_t it;
      if (bson_iter_init_find(&it, doc, "position") && BSON_ITER_HOLDS_UTF8(&it))
        value = bson_iter_utf8(&it, nullptr);
    }
    bson_error_t error;
    const bool failed = mongoc_cursor_error(cursor, &error);
    mongoc_cursor_destroy(cursor);
    mongoc_collection_destroy(positions);
    if (failed)
      throw scrubbed(std::string("MongoDB read a position: ") + error.message, failure_of(error));
    return value;
  }

  void save_position(const std::string& key, const std::string& value) override {
    ensure_open();
    BsonPtr filter(BCON_NEW("_id", BCON_UTF8(key.c_str())));
    BsonPtr update(BCON_NEW("$set", "{", "position", BCON_UTF8(value.c_str()), "saved_at",
                            BCON_DATE_TIME(now_ms()), "}"));
    BsonPtr opts(BCON_NEW("upsert", BCON_BOOL(true)));
    mongoc_write_concern_append(write_concern_, opts.get());
    mongoc_collection_t* positions =
        mongoc_client_get_collection(client_, options_.database.c_str(), "sluice_positions");
    bson_error_t error;
    const bool saved = mongoc_collection_update_one(positions, filter.get(), update.get(),
                                                    opts.get(), nullptr, &error);
    mongoc_collection_destroy(positions);
    if (!saved)
      throw scrubbed(std::string("MongoDB save a position: ") + error.message, failure_of(error));
  }

  // An unordered insert_many writes the others when one document fails.
  bool atomic_batches() const override { return false; }
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
    for (auto* collection : collections_) mongoc_collection_destroy(collection);
    collections_.clear();
    if (rejects_) mongoc_collection_destroy(rejects_);
    if (client_) mongoc_client_destroy(client_);
    write_concern_ = nullptr;
    rejects_ = nullptr;
    rejects_indexed_ = false;
    client_ = nullptr;
  }

  MongoOptions options_;
  mongoc_client_t* client_ = nullptr;
  std::vector<std::string> names_;                 // sink.table, then the routed collections
  std::vector<mongoc_collection_t*> collections_;  // by Record::route
  mongoc_collection_t* rejects_ = nullptr;
  bool rejects_indexed_ = false;  // the lookup index of write_rejects, asked for once
  mongoc_write_concern_t* write_concern_ = nullptr;
};

}  // namespace

std::unique_ptr<Sink> make_mongo_sink(MongoOptions options) {
  return std::make_unique<MongoSink>(std::move(options));
}

}  // namespace sluice::sinks
