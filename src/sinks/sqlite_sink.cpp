// SQLite, the embedded default: WAL mode, one transaction per batch,
// INSERT ... ON CONFLICT(hash) DO NOTHING, sqlite3_changes() tells new from duplicate.
#include <sqlite3.h>

#include "sinks/sink.hpp"
#include "sinks/sql.hpp"

namespace sluice::sinks {
namespace {

class SqliteSink final : public Sink {
 public:
  explicit SqliteSink(SqliteOptions options) : options_(std::move(options)) {}
  ~SqliteSink() override { close(); }

  void open() override {
    close();
    if (sqlite3_open_v2(options_.path.c_str(), &db_,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                        nullptr) != SQLITE_OK)
      fail("open " + options_.path);
    sqlite3_busy_timeout(db_, static_cast<int>(options_.busy_timeout.count()));
    exec("PRAGMA journal_mode=WAL");
    exec("PRAGMA synchronous=" + options_.synchronous);
    exec("CREATE TABLE IF NOT EXISTS " + sql_identifier(options_.table) +
         " (hash TEXT NOT NULL, message_id TEXT, document TEXT NOT NULL,"
         " written_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')))");
    exec("CREATE UNIQUE INDEX IF NOT EXISTS " + sql_identifier("uniq_" + options_.table + "_hash") +
         " ON " + sql_identifier(options_.table) + " (hash)");
    exec("CREATE TABLE IF NOT EXISTS " + sql_identifier(options_.rejects_table) +
         " (id INTEGER PRIMARY KEY, message_id TEXT, reason TEXT NOT NULL, detail TEXT, body TEXT,"
         " source TEXT, rejected_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')))");
    insert_ =
        prepare("INSERT INTO " + sql_identifier(options_.table) +
                " (hash, message_id, document) VALUES (?1, ?2, ?3) ON CONFLICT(hash) DO NOTHING");
    insert_reject_ =
        prepare("INSERT INTO " + sql_identifier(options_.rejects_table) +
                " (message_id, reason, detail, body, source) VALUES (?1, ?2, ?3, ?4, ?5)");
  }

  std::vector<WriteOutcome> write(std::span<const pipeline::Record> records) override {
    ensure_open();
    std::vector<WriteOutcome> outcomes;
    outcomes.reserve(records.size());
    exec("BEGIN IMMEDIATE");
    try {
      for (const auto& r : records) {
        const std::string document = r.document.dump();
        sqlite3_reset(insert_);
        sqlite3_bind_text(insert_, 1, r.hash.data(), static_cast<int>(r.hash.size()),
                          SQLITE_TRANSIENT);
        sqlite3_bind_text(insert_, 2, r.message_id.data(), static_cast<int>(r.message_id.size()),
                          SQLITE_TRANSIENT);
        sqlite3_bind_text(insert_, 3, document.data(), static_cast<int>(document.size()),
                          SQLITE_TRANSIENT);
        if (sqlite3_step(insert_) != SQLITE_DONE) fail("insert");
        outcomes.push_back(sqlite3_changes(db_) == 1 ? WriteOutcome::inserted
                                                     : WriteOutcome::duplicate);
      }
      exec("COMMIT");
    } catch (...) {
      sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
      throw;
    }
    return outcomes;
  }

  void write_rejects(std::span<const RejectRow> rows) override {
    ensure_open();
    exec("BEGIN IMMEDIATE");
    try {
      for (const auto& row : rows) {
        sqlite3_reset(insert_reject_);
        const std::string* values[] = {&row.message_id, &row.reason, &row.detail, &row.body,
                                       &row.source};
        for (int i = 0; i < 5; ++i)
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

  std::uint64_t count_records() override {
    ensure_open();
    sqlite3_stmt* stmt = prepare("SELECT count(*) FROM " + sql_identifier(options_.table));
    std::uint64_t n = 0;
    if (sqlite3_step(stmt) == SQLITE_ROW)
      n = static_cast<std::uint64_t>(sqlite3_column_int64(stmt, 0));
    sqlite3_finalize(stmt);
    return n;
  }

  std::string describe() const override { return "sqlite:" + options_.path; }

 private:
  void ensure_open() {
    if (!db_) open();
  }
  [[noreturn]] void fail(const std::string& what) {
    const std::string message = "SQLite " + what + " on " + options_.path + ": " +
                                (db_ ? sqlite3_errmsg(db_) : "no connection");
    // Busy past the timeout (another writer holds the file) means: wait for it.
    const int code = db_ ? sqlite3_errcode(db_) : SQLITE_CANTOPEN;
    throw SinkError(message, code == SQLITE_BUSY || code == SQLITE_LOCKED);
  }
  void exec(const std::string& sql) {
    char* error = nullptr;
    if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &error) != SQLITE_OK) {
      const std::string message = error ? error : "unknown error";
      sqlite3_free(error);
      throw SinkError("SQLite '" + sql.substr(0, 40) + "' on " + options_.path + ": " + message);
    }
  }
  sqlite3_stmt* prepare(const std::string& sql) {
    sqlite3_stmt* stmt = nullptr;
    if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &stmt, nullptr) != SQLITE_OK) fail("prepare");
    return stmt;
  }
  void close() {
    if (insert_) sqlite3_finalize(insert_);
    if (insert_reject_) sqlite3_finalize(insert_reject_);
    insert_ = insert_reject_ = nullptr;
    if (db_) sqlite3_close(db_);
    db_ = nullptr;
  }

  SqliteOptions options_;
  sqlite3* db_ = nullptr;
  sqlite3_stmt* insert_ = nullptr;
  sqlite3_stmt* insert_reject_ = nullptr;
};

}  // namespace

std::unique_ptr<Sink> make_sqlite_sink(SqliteOptions options) {
  return std::make_unique<SqliteSink>(std::move(options));
}

}  // namespace sluice::sinks
