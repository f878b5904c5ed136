#pragma once
// Idempotent, batched sinks: insert first under a unique index on the content hash,
// a duplicate counts as success, no read before write. Each sink object is one
// connection, used by one writer thread; blocking calls are fine here.

#include <chrono>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipeline/transform.hpp"

namespace sluice::sinks {

enum class WriteOutcome { inserted, duplicate, failed };

// A failure of a whole batch: the records are not written. `unavailable` when the
// database cannot be reached at all (down, connection lost): writers then wait for it
// without limit, holding their messages (and so the intake) back; other failures are
// retried a bounded number of times, then the messages are nacked.
class SinkError : public std::runtime_error {
 public:
  explicit SinkError(const std::string& message, bool unavailable = false)
      : std::runtime_error(message), unavailable_(unavailable) {}
  bool unavailable() const { return unavailable_; }

 private:
  bool unavailable_;
};

struct RejectRow {
  std::string message_id;
  std::string reason;  // malformed | validation | schema_drift
  std::string detail;
  std::string body;
  std::string source;
};

class Sink {
 public:
  virtual ~Sink() = default;
  // Connects and creates the table/collection and the unique index if missing.
  virtual void open() = 0;
  // One round trip for the whole batch; one outcome per record, in order.
  virtual std::vector<WriteOutcome> write(std::span<const pipeline::Record> records) = 0;
  virtual void write_rejects(std::span<const RejectRow> rows) = 0;
  virtual std::uint64_t count_records() = 0;
  virtual std::string describe() const = 0;
};

// A typed column for PostgreSQL, copied from a normalized field.
struct Column {
  std::string field;
  pipeline::FieldType type = pipeline::FieldType::string;
};

struct SqliteOptions {
  std::string path = "sluice.db";
  std::string table = "records";
  std::string rejects_table = "rejects";
  std::string synchronous = "FULL";  // FULL: a commit survives power loss; NORMAL: a crash
  std::chrono::milliseconds busy_timeout{10000};
};

struct PostgresOptions {
  std::string dsn;  // libpq connection string
  std::string table = "records";
  std::string rejects_table = "rejects";
  std::vector<Column> columns;
  std::chrono::seconds connect_timeout{5};
};

struct MongoOptions {
  std::string uri;
  std::string database = "sluice";
  std::string collection = "records";
  std::string rejects_collection = "rejects";
  std::string write_concern = "majority";  // "majority", "1", "0" or a number
  bool id_from_hash = false;  // _id derived from the hash instead of a separate unique index
  std::string hash_field = "documentHash";
};

std::unique_ptr<Sink> make_sqlite_sink(SqliteOptions options);
std::unique_ptr<Sink> make_postgres_sink(PostgresOptions options);
std::unique_ptr<Sink> make_mongo_sink(MongoOptions options);

}  // namespace sluice::sinks
