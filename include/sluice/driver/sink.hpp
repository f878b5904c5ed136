#pragma once
// Idempotent, batched sinks: insert first under a unique index on the content hash,
// a duplicate counts as success, no read before write. Each sink object is one
// connection, used by one writer thread; blocking calls are fine here.

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "sluice/driver/record.hpp"
#include "sluice/position_store.hpp"

namespace sluice::sinks {

// refused: the database refuses this record whatever we do (invalid data, a constraint
// other than the content hash, too large); it is rejected with reason `sink_refused`.
// failed: not written this time (e.g. a write concern not met); it comes back later.
enum class WriteOutcome { inserted, duplicate, failed, refused };

// One outcome per record, in order; for a refused or failed record, the database's words.
struct WriteResult {
  std::vector<WriteOutcome> outcomes;
  std::vector<std::pair<std::size_t, std::string>> reasons;  // (record index, why)
};

// Why a whole batch was not written, decided by each sink from the database's own
// codes (SQLSTATE, SQLite result codes, MongoDB error codes), in one place per sink:
//  - unavailable: the database cannot be reached (down, connection lost): writers wait
//    for it without limit, holding their messages (and so the intake) back;
//  - transient: timeouts, serialization failures, shutdown, exhausted resources: retried
//    a bounded number of times with jittered backoff, then the messages are nacked;
//  - refused: something in the batch is refused deterministically: the writer splits
//    the batch to find the refused records, writes the rest and rejects those.
enum class SinkFailure { unavailable, transient, refused };
inline const char* to_string(SinkFailure failure) {
  switch (failure) {
    case SinkFailure::unavailable:
      return "unavailable";
    case SinkFailure::transient:
      return "transient";
    case SinkFailure::refused:
      return "refused";
  }
  return "transient";
}

class SinkError : public std::runtime_error {
 public:
  explicit SinkError(const std::string& message, SinkFailure kind = SinkFailure::transient)
      : std::runtime_error(message), kind_(kind) {}
  SinkFailure kind() const { return kind_; }
  bool unavailable() const { return kind_ == SinkFailure::unavailable; }

 private:
  SinkFailure kind_;
};

// A source's position that a batch brings forward (a RabbitMQ stream's offset, a file's
// checkpoint), under its PositionStore key.
using PositionUpdate = sluice::PositionUpdate;

struct RejectRow {
  std::string message_id;
  std::string reason;  // malformed | validation | schema_drift | sink_refused | payload_...
  std::string detail;
  std::string body;
  std::string source;
  // What the pipeline reads besides the body, as JSON (receive count, times, group,
  // headers): a replay sees the message as it came. Empty: not kept.
  std::string properties;
  // The pipeline that rejected it (several may share a table). Empty: a row of an
  // earlier release, or a program of its own.
  std::string pipeline;
};

// A rejects table's row, as `sluice rejects` reads it.
struct StoredReject {
  std::string id;  // SQLite, PostgreSQL: the row's integer id; MongoDB: _id in hex
  RejectRow row;
  std::string rejected_at;  // RFC 3339, UTC
  std::string replayed_at;  // empty: not replayed
};

struct RejectQuery {
  std::string reason;     // empty: every reason
  bool replayed = false;  // also the rows already replayed
  std::string after_id;   // paging: the rows after this id (empty: from the first)
  std::string pipeline;   // only this pipeline's rows (empty: every row)
  std::size_t limit = 1000;
};

class Sink {
 public:
  virtual ~Sink() = default;
  // Connects and creates the table/collection and the unique index if missing.
  virtual void open() = 0;
  // One round trip for the whole batch; one outcome per record, in order. Throws
  // SinkError when the batch as a whole is not written.
  virtual WriteResult write(std::span<const pipeline::Record> records) = 0;
  // write(records) with positions that the batch brings forward: where
  // positions_with_records() (SQLite, PostgreSQL) they are saved in the batch's own
  // transaction, so the records and the positions are durable together or not at all,
  // and a restart resumes exactly after the last batch written. Such a sink writes a
  // batch whole or not at all: its outcomes are inserted or duplicate, else it throws
  // (the writers save a batch's position with it only then). Otherwise (MongoDB)
  // the records first, then the positions (save_position): a stop between the two
  // reads again what came after the last position saved, which the content hash
  // stores once. A position replaces the value under its key (the caller never offers
  // one behind the last).
  virtual WriteResult write_with_positions(std::span<const pipeline::Record> records,
                                           std::span<const PositionUpdate> positions) {
    auto result = write(records);
    for (const auto& p : positions) save_position(p.key, p.value);
    return result;
  }
  virtual bool positions_with_records() const { return false; }
  // One row per message, reason and pipeline: a row already there (the message
  // delivered again after its row was written) is not written twice. A message is
  // known by its id and its body (body_sha256): another body under a reused id (a
  // file's line, a producer's repeated message-id) is a row of its own.
  virtual void write_rejects(std::span<const RejectRow> rows) = 0;
  // The rejects table, oldest first; rows written by a release without replayed_at read
  // as not replayed.
  virtual std::vector<StoredReject> read_rejects(const RejectQuery& query) = 0;
  // Marks the rows with these ids replayed, now.
  virtual void mark_replayed(std::span<const std::string> ids) = 0;
  // Records in every table it writes (sink.table and the routed ones).
  virtual std::uint64_t count_records() = 0;
  // A source's position in a log it reads (sluice/position_store.hpp), in the table or
  // collection sluice_positions (made at first use): the value under `key`, or none.
  virtual std::optional<std::string> load_position(const std::string& key) = 0;
  // Replaces it, durably (the sink's commit or write concern). Throws SinkError.
  virtual void save_position(const std::string& key, const std::string& value) = 0;
  virtual std::string describe() const = 0;
  // A batch is all or nothing for failures: no record of it comes back `failed` while a
  // later one is written (one statement, one transaction). Only then do the writers
  // put several records of an ordered group in one batch.
  virtual bool atomic_batches() const { return true; }
  // Called from another thread (at the shutdown deadline): makes a call blocked in
  // the database return with an error soon. Must not block.
  virtual void interrupt() {}
};

}  // namespace sluice::sinks
