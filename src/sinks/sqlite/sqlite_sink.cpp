// SQLite, the embedded default: WAL mode, one transaction per batch,
// INSERT ... ON CONFLICT(hash) DO NOTHING, sqlite3_changes() tells new from duplicate.
#include "sinks/sqlite/sqlite_sink.hpp"

#include <sqlite3.h>

#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#include "common/crypto.hpp"
#include "sinks/sql.hpp"

namespace sluice::sinks {
namespace {

// The one place where SQLite's result codes are sorted.
SinkFailure classify(int code) {
  switch (code & 0xff) {
    case SQLITE_BUSY:  // another writer holds the file past busy_timeout: wait for it
    case SQLITE_LOCKED:
      return SinkFailure::unavailable;
    case SQLITE_CONSTRAINT:  // NOT NULL, CHECK, a trigger's RAISE, another unique index
    case SQLITE_TOOBIG:
    case SQLITE_MISMATCH:
      return SinkFailure::refused;
    default:  // I/O errors, a full disk, out of memory, interrupted
      return SinkFailure::transient;
  }
}

class SqliteSink final : public Sink {
 public:
  explicit SqliteSink(SqliteOptions options) : options_(std::move(options)) {
    tables_.push_back(options_.table);
    tables_.insert(tables_.end(), options_.routes.begin(), options_.routes.end());
  }
  ~SqliteSink() override { close(); }

  void open() override {
    close();
    sqlite3* db = nullptr;
    const int opened =
        sqlite3_open_v2(options_.path.c_str(), &db,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
    {
      std::lock_guard lock(db_mutex_);
      db_ = db;  // even on failure: it holds the error message (close() frees it)
    }
    if (opened != SQLITE_OK) fail("open " + options_.path);
    // busy_timeout, in slices that notice interrupt().
    sqlite3_busy_handler(
        db_,
        [](void* self, int attempt) -> int {
          auto* sink = static_cast<SqliteSink*>(self);
          if (sink->interrupted_ || attempt >= sink->options_.busy_timeout.count() / 5) return 0;
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
          return 1;
        },
        this);
    exec("PRAGMA journal_mode=WAL");
    exec("PRAGMA synchronous=" + options_.synchronous);
    for (const auto& table : tables_) {
      exec("CREATE TABLE IF NOT EXISTS " + sql_identifier(table) +
           " (hash TEXT NOT NULL, message_id TEXT, document TEXT NOT NULL,"
           " written_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')))");
      exec("CREATE UNIQUE INDEX IF NOT EXISTS " + sql_identifier("uniq_" + table + "_hash") +
           " ON " + sql_identifier(table) + " (hash)");
    }
    exec("CREATE TABLE IF NOT EXISTS " + sql_identifier(options_.rejects_table) +
         " (id INTEGER PRIMARY KEY, message_id TEXT, reason TEXT NOT NULL, detail TEXT, body TEXT,"
         " source TEXT, rejected_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')),"
         " replayed_at TEXT, properties TEXT, pipeline TEXT, body_sha256 TEXT)");
    // A rejects table of an earlier release gets the columns (another process may add
    // one at the same moment: then its ALTER fails and the column is there).
    for (const char* column : {"replayed_at", "properties", "pipeline", "body_sha256"}) {
      if (has_column(column)) continue;
      try {
        exec("ALTER TABLE " + sql_identifier(options_.rejects_table) + " ADD COLUMN " + column +
             " TEXT");
      } catch (const SinkError&) {
        if (!has_column(column)) throw;
      }
    }
    // One row per message, reason, pipeline and body (rows of earlier releases have no
    // pipeline, NULL: distinct from any other, so they never stop the index being made;
    // nor do messages without an id).
    exec("CREATE UNIQUE INDEX IF NOT EXISTS " +
         sql_identifier("uniq_" + options_.rejects_table + "_message") + " ON " +
         sql_identifier(options_.rejects_table) + " (pipeline, message_id, reason, body_sha256)");
    for (const auto& table : tables_)
      inserts_.push_back(prepare(
          "INSERT INTO " + sql_identifier(table) +
          " (hash, message_id, document) VALUES (?1, ?2, ?3) ON CONFLICT(hash) DO NOTHING"));
    insert_reject_ = prepare("INSERT INTO " + sql_identifier(options_.rejects_table) +
                             " (message_id, reason, detail, body, source, properties, pipeline,"
                             " body_sha256)"
                             " VALUES (NULLIF(?1, ''), ?2, ?3, ?4, ?5, NULLIF(?6, ''),"
                             " ?7, ?8) ON CONFLICT DO NOTHING");
  }

  WriteResult write(std::span<const pipeline::Record> records) override {
    return write_with_positions(records, {});
  }

  // The positions first, then the records, in one transaction.
  WriteResult write_with_positions(std::span<const pipeline::Record> records,
                                   std::span<const PositionUpdate> positions) override {
    if (positions.empty())
      ensure_open();
    else
      ensure_positions();
    WriteResult result;
    auto& outcomes = result.outcomes;
    outcomes.reserve(records.size());
    exec("BEGIN IMMEDIATE");
    try {
      for (const auto& p : positions) upsert_position(p.key, p.value);
      for (const auto& r : records) {
        const std::string document = r.document.dump();
        sqlite3_stmt* insert = inserts_.at(r.route);
        sqlite3_reset(insert);
        sqlite3_bind_text(insert, 1, r.hash.data(), static_cast<int>(r.hash.size()),
                          SQLITE_TRANSIENT);
        sqlite3_bind_text(insert, 2, r.message_id.data(), static_cast<int>(r.message_id.size()),
                          SQLITE_TRANSIENT);
        sqlite3_bind_text(insert, 3, document.data(), static_cast<int>(document.size()),
                          SQLITE_TRANSIENT);
        if (sqlite3_step(insert) != SQLITE_DONE) fail("insert");
        outcomes.push_back(sqlite3_changes(db_) == 1 ? WriteOutcome::inserted
                                                     : WriteOutcome::duplicate);
      }
      exec("COMMIT");
    } catch (...) {
      sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
      throw;
    }
    return result;
  }

  void write_rejects(std::span<const RejectRow> rows) override {
    ensure_open();
    exec("BEGIN IMMEDIATE");
    try {
      for (const auto& row : rows) {
        sqlite3_reset(insert_reject_);
        const std::string body_sha256 = crypto::sha256_hex(row.body);
        const std::string* values[] = {&row.message_id, &row.reason, &row.detail,
                                       &row.body,       &row.source, &row.properties,
                                       &row.pipeline,   &body_sha256};
        for (int i = 0; i < 8; ++i)
          sqlite3_bind_text(insert_reject_, i + 1, values[i]->data(),
                            static_cast<int>(values[i]->size()), SQLITE_TRANSIENT);
        if (sqlite3_step(insert_reject_) != SQLITE_DONE) fail("insert reject");
      }
      exec("COMMIT");
    } catch (...) {
      sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
      throw;
    }
  }

  std::vector<StoredReject> read_rejects(const RejectQuery& query) override {
    ensure_open();
    sqlite3_stmt* stmt = prepare(
        "SELECT id, message_id, reason, detail, body, source, rejected_at, replayed_at, "
        "properties, pipeline FROM " +
        sql_identifier(options_.rejects_table) +
        " WHERE id > ?1 AND (?2 = '' OR reason = ?2) AND (?3 OR replayed_at IS NULL)"
        " AND (?5 = '' OR pipeline = ?5) ORDER BY id LIMIT ?4");
    sqlite3_bind_int64(stmt, 1, query.after_id.empty() ? 0 : std::stoll(query.after_id));
    sqlite3_bind_text(stmt, 2, query.reason.data(), static_cast<int>(query.reason.size()),
                      SQLITE_TRANSIENT);
    sqlite3_bind_int(stmt, 3, query.replayed ? 1 : 0);
    sqlite3_bind_int64(stmt, 4, static_cast<sqlite3_int64>(query.limit));
    sqlite3_bind_text(stmt, 5, query.pipeline.data(), static_cast<int>(query.pipeline.size()),
                      SQLITE_TRANSIENT);
    auto text = [&](int column) {
      const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt, column));
      return p ? std::string(p, static_cast<std::size_t>(sqlite3_column_bytes(stmt, column)))
               : std::string();
    };
    std::vector<StoredReject> rows;
    int step = SQLITE_ROW;
    while ((step = sqlite3_step(stmt)) == SQLITE_ROW)
      rows.push_back({text(0),
                      {text(1), text(2), text(3), text(4), text(5), text(8), text(9)},
                      text(6),
                      text(7)});
    sqlite3_finalize(stmt);
    if (step != SQLITE_DONE) fail("read rejects");
    return rows;
  }

  void mark_replayed(std::span<const std::string> ids) override {
    ensure_open();
    sqlite3_stmt* stmt =
        prepare("UPDATE " + sql_identifier(options_.rejects_table) +
                " SET replayed_at = strftime('%Y-%m-%dT%H:%M:%fZ','now') WHERE id = ?1");
    try {
      exec("BEGIN IMMEDIATE");
      for (const auto& id : ids) {
        sqlite3_reset(stmt);
        sqlite3_bind_int64(stmt, 1, std::stoll(id));
        if (sqlite3_step(stmt) != SQLITE_DONE) fail("mark replayed");
      }
      exec("COMMIT");
    } catch (...) {
      sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
      sqlite3_finalize(stmt);
      throw;
    }
    sqlite3_finalize(stmt);
  }

  std::uint64_t count_records() override {
    ensure_open();
    std::uint64_t n = 0;
    for (const auto& table : tables_) {
      sqlite3_stmt* stmt = prepare("SELECT count(*) FROM " + sql_identifier(table));
      if (sqlite3_step(stmt) == SQLITE_ROW)
        n += static_cast<std::uint64_t>(sqlite3_column_int64(stmt, 0));
      sqlite3_finalize(stmt);
    }
    return n;
  }

  std::optional<std::string> load_position(const std::string& key) override {
    ensure_positions();
    sqlite3_stmt* stmt = prepare("SELECT position FROM sluice_positions WHERE key = ?1");
    sqlite3_bind_text(stmt, 1, key.c_str(), -1, SQLITE_TRANSIENT);
    std::optional<std::string> value;
    const int step = sqlite3_step(stmt);
    if (step == SQLITE_ROW) value = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
    sqlite3_finalize(stmt);
    if (step != SQLITE_ROW && step != SQLITE_DONE) fail("read a position");
    return value;
  }

  bool positions_with_records() const override { return true; }

  void save_position(const std::string& key, const std::string& value) override {
    ensure_positions();
    upsert_position(key, value);
  }

  std::string describe() const override { return "sqlite:" + options_.path; }

  void interrupt() override {
    interrupted_ = true;
    std::lock_guard lock(db_mutex_);  // sqlite3_interrupt needs an open connection
    if (db_) sqlite3_interrupt(db_);
  }

 private:
  void upsert_position(const std::string& key, const std::string& value) {
    sqlite3_stmt* stmt = prepare(
        "INSERT INTO sluice_positions (key, position, saved_at) VALUES "
        "(?1, ?2, strftime('%Y-%m-%dT%H:%M:%fZ','now')) ON CONFLICT (key) DO UPDATE SET "
        "position = excluded.position, saved_at = excluded.saved_at");
    sqlite3_bind_text(stmt, 1, key.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(stmt, 2, value.c_str(), -1, SQLITE_TRANSIENT);
    const int step = sqlite3_step(stmt);
    sqlite3_finalize(stmt);
    if (step != SQLITE_DONE) fail("save a position");
  }
  void ensure_open() {
    if (!db_) open();
  }
  void ensure_positions() {
    ensure_open();
    if (positions_ready_) return;
    exec(
        "CREATE TABLE IF NOT EXISTS sluice_positions (key TEXT PRIMARY KEY, position TEXT NOT "
        "NULL, saved_at TEXT NOT NULL)");
    positions_ready_ = true;
  }
  [[noreturn]] void fail(const std::string& what) {
    const std::string message = "SQLite " + what + " on " + options_.path + ": " +
                                (db_ ? sqlite3_errmsg(db_) : "no connection");
    // Busy past the timeout (another writer holds the file) means: wait for it.
    throw SinkError(message, classify(db_ ? sqlite3_extended_errcode(db_) : SQLITE_CANTOPEN));
  }
  void exec(const std::string& sql) {
    char* error = nullptr;
    if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &error) != SQLITE_OK) {
      const std::string message = error ? error : "unknown error";
      sqlite3_free(error);
      throw SinkError("SQLite '" + sql.substr(0, 40) + "' on " + options_.path + ": " + message,
                      classify(sqlite3_extended_errcode(db_)));
    }
  }
  bool has_column(const char* column) {
    sqlite3_stmt* stmt = prepare("SELECT count(*) FROM pragma_table_info(?1) WHERE name = ?2");
    sqlite3_bind_text(stmt, 1, options_.rejects_table.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(stmt, 2, column, -1, SQLITE_STATIC);
    const bool has = sqlite3_step(stmt) == SQLITE_ROW && sqlite3_column_int(stmt, 0) == 1;
    sqlite3_finalize(stmt);
    return has;
  }
  sqlite3_stmt* prepare(const std::string& sql) {
    sqlite3_stmt* stmt = nullptr;
    if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &stmt, nullptr) != SQLITE_OK) fail("prepare");
    return stmt;
  }
  void close() {
    for (auto* insert : inserts_) sqlite3_finalize(insert);
    inserts_.clear();
    if (insert_reject_) sqlite3_finalize(insert_reject_);
    insert_reject_ = nullptr;
    positions_ready_ = false;
    std::lock_guard lock(db_mutex_);
    if (db_) sqlite3_close(db_);
    db_ = nullptr;
  }

  SqliteOptions options_;
  std::mutex db_mutex_;  // db_ against interrupt() from another thread
  sqlite3* db_ = nullptr;
  std::atomic<bool> interrupted_{false};
  std::vector<std::string> tables_;     // sink.table, then the routed tables
  std::vector<sqlite3_stmt*> inserts_;  // one per table, by Record::route
  sqlite3_stmt* insert_reject_ = nullptr;
  bool positions_ready_ = false;  // sluice_positions made on this connection
};

}  // namespace

std::unique_ptr<Sink> make_sqlite_sink(SqliteOptions options) {
  return std::make_unique<SqliteSink>(std::move(options));
}

}  // namespace sluice::sinks
