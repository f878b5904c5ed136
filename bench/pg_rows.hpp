#pragma once
// The database half of the bare clients' database ceilings (bench_sqs_raw,
// bench_amqp_raw): the very rows `sluice run` writes, worked out beforehand by the
// harness with Sluice's own transform (ROWS: "md5 <TAB> hash <TAB> document" lines, by
// the body's MD5), written the way the PostgreSQL sink writes them: the same table
// shape, the same statement (INSERT ... SELECT FROM unnest of binary arrays ... ON
// CONFLICT (hash) DO NOTHING RETURNING hash, prepared once; form "values": the multi-row
// VALUES with 3 parameters per row the sink sent before; form "select-first": seed
// 001's rejected design, a SELECT of the batch's hashes first, then the insert of those
// not found), 100 rows per statement on 4 connections, each waiting up to 20 ms to fill
// its batch (the pipeline's sink.batch_timeout; 0 for a FIFO queue's rows, which the
// pipeline's order-keeping writer writes without waiting), in hash order. What the bare clients do
// not do is decode, normalize or hash: the pipeline's own work. Plain libpq.
#include <libpq-fe.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace sluice::bench {

// Looked up by a view of the body's MD5, without a copy.
struct TransparentHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
// MD5 of the body -> (the record's hash, its document).
using Rows = std::unordered_map<std::string, std::pair<std::string, std::string>, TransparentHash,
                                std::equal_to<>>;

inline Rows load_rows(const std::string& path) {
  Rows rows;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const auto a = line.find('\t'), b = line.find('\t', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    rows[line.substr(0, a)] = {line.substr(a + 1, b - a - 1), line.substr(b + 1)};
  }
  return rows;
}

// A row to write, and what its message needs to be settled once it is written.
struct PendingRow {
  const std::string* hash;
  const std::string* document;
  std::string message_id;
  std::string receipt;    // SQS
  std::uint64_t tag = 0;  // AMQP
};

class RowWriters {
 public:
  static constexpr int kWriters = 4;
  static constexpr std::size_t kRowsPerInsert = 100;

  // Creates the table; `written` gets each batch once PostgreSQL has it (on a writer's
  // thread). Exits the process on a database error (a benchmark has no recovery).
  RowWriters(std::string dsn, std::string table, const std::string& form,
             std::function<void(std::vector<PendingRow>&&)> written,
             std::chrono::milliseconds batch_wait = std::chrono::milliseconds(20),
             std::size_t rows_per_insert = kRowsPerInsert)
      : dsn_(std::move(dsn)),
        table_(std::move(table)),
        batch_wait_(batch_wait),
        rows_per_insert_(std::max<std::size_t>(1, rows_per_insert)),
        values_form_(form == "values"),
        select_first_(form == "select-first"),
        copy_staging_(form == "copy-staging"),
        written_(std::move(written)) {
    PGconn* conn = connect();
    exec(conn, "CREATE TABLE IF NOT EXISTS \"" + table_ +
                   "\" (hash text NOT NULL, message_id text, document jsonb NOT NULL, "
                   "written_at timestamptz NOT NULL DEFAULT now())");
    exec(conn,
         "CREATE UNIQUE INDEX IF NOT EXISTS \"" + table_ + "_hash\" ON \"" + table_ + "\" (hash)");
    PQfinish(conn);
    for (int w = 0; w < kWriters; ++w) threads_.emplace_back([this] { run(); });
  }
  ~RowWriters() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    ready_.notify_all();
    for (auto& t : threads_) t.join();
  }

  void add(std::vector<PendingRow>&& rows) {
    {
      std::lock_guard lock(mutex_);
      for (auto& row : rows) pending_.push_back(std::move(row));
    }
    ready_.notify_all();
  }

 private:
  [[noreturn]] static void fail(const char* what) {
    std::fprintf(stderr, "bench row writers: %s", what);
    std::exit(1);
  }
  PGconn* connect() const {
    PGconn* conn = PQconnectdb(dsn_.c_str());
    if (PQstatus(conn) != CONNECTION_OK) fail(PQerrorMessage(conn));
    return conn;
  }
  static void exec(PGconn* conn, const std::string& sql) {
    PGresult* r = PQexec(conn, sql.c_str());
    if (PQresultStatus(r) != PGRES_COMMAND_OK) fail(PQresultErrorMessage(r));
    PQclear(r);
  }
  static void prepare(PGconn* conn, const char* name, const std::string& sql, int parameters) {
    PGresult* r = PQprepare(conn, name, sql.c_str(), parameters, nullptr);
    if (PQresultStatus(r) != PGRES_COMMAND_OK) fail(PQresultErrorMessage(r));
    PQclear(r);
  }
  // PostgreSQL's binary array format, one dimension, no NULLs (as the sink sends it).
  static std::string binary_array(std::uint32_t element_type,
                                  const std::vector<std::string_view>& values) {
    std::string out;
    auto put32 = [&](std::uint32_t v) {
      for (int shift = 24; shift >= 0; shift -= 8) out += static_cast<char>(v >> shift);
    };
    for (std::uint32_t v : {1u, 0u, element_type, static_cast<std::uint32_t>(values.size()), 1u})
      put32(v);
    for (auto v : values) {
      put32(static_cast<std::uint32_t>(v.size()));
      out.append(v);
    }
    return out;
  }

  void run() {
    PGconn* conn = connect();
    if (copy_staging_)
      exec(conn,
           "CREATE TEMP TABLE staging (hash text, message_id text, document jsonb) ON COMMIT "
           "DELETE ROWS");
    if (!values_form_) {
      prepare(conn, "insert_rows",
              "INSERT INTO \"" + table_ +
                  "\" (hash, message_id, document) SELECT * FROM unnest($1::text[], $2::text[], "
                  "$3::jsonb[]) ON CONFLICT (hash) DO NOTHING RETURNING hash",
              3);
      if (copy_staging_)
        prepare(conn, "insert_staged",
                "INSERT INTO \"" + table_ +
                    "\" (hash, message_id, document) SELECT * FROM staging ON CONFLICT (hash) DO "
                    "NOTHING RETURNING hash",
                0);
      prepare(conn, "select_known",
              "SELECT hash FROM \"" + table_ + "\" WHERE hash = ANY($1::text[])", 1);
    }
    for (;;) {
      std::vector<PendingRow> rows;
      {
        std::unique_lock lock(mutex_);
        ready_.wait(lock, [&] { return stopping_ || !pending_.empty(); });
        if (stopping_) break;
        // The pipeline's group commit (sink.batch_timeout): wait up to batch_wait_ for a
        // full batch, so that both send PostgreSQL the same statements.
        ready_.wait_for(lock, batch_wait_,
                        [&] { return stopping_ || pending_.size() >= rows_per_insert_; });
        if (pending_.empty()) continue;  // another writer took them meanwhile
        while (!pending_.empty() && rows.size() < rows_per_insert_) {
          rows.push_back(std::move(pending_.front()));
          pending_.pop_front();
        }
      }
      // In hash order, as the pipeline writes them: concurrent writers then take the
      // unique index's locks in one order and cannot deadlock.
      std::sort(rows.begin(), rows.end(),
                [](const PendingRow& a, const PendingRow& b) { return *a.hash < *b.hash; });
      write(conn, rows);
      written_(std::move(rows));
    }
    PQfinish(conn);
  }

  // The candidate: the rows by binary COPY into a temporary staging table (no
  // WAL, no index), then one INSERT ... SELECT ... ON CONFLICT DO NOTHING RETURNING of
  // them, in one transaction: BEGIN, the COPY's start, its data and end, the insert and
  // COMMIT are five round trips (libpq cannot pipeline a COPY), against unnest's one.
  void write_by_copy(PGconn* conn, const std::vector<PendingRow>& rows) const {
    exec(conn, "BEGIN");
    PGresult* r = PQexec(conn, "COPY staging FROM STDIN (FORMAT binary)");
    if (PQresultStatus(r) != PGRES_COPY_IN) fail(PQresultErrorMessage(r));
    PQclear(r);
    std::string data("PGCOPY\n\377\r\n\0", 11);
    auto put = [&](std::uint32_t v, int bytes) {
      for (int shift = 8 * (bytes - 1); shift >= 0; shift -= 8)
        data += static_cast<char>(v >> shift);
    };
    put(0, 4);  // flags
    put(0, 4);  // header extension
    for (const auto& row : rows) {
      put(3, 2);
      for (std::string_view field :
           {std::string_view(*row.hash), std::string_view(row.message_id)}) {
        put(static_cast<std::uint32_t>(field.size()), 4);
        data += field;
      }
      put(static_cast<std::uint32_t>(row.document->size() + 1), 4);
      data += '\x01';  // jsonb's binary format: version 1, then the text
      data += *row.document;
    }
    put(0xffff, 2);  // the trailer
    if (PQputCopyData(conn, data.data(), static_cast<int>(data.size())) != 1 ||
        PQputCopyEnd(conn, nullptr) != 1)
      fail(PQerrorMessage(conn));
    r = PQgetResult(conn);
    if (PQresultStatus(r) != PGRES_COMMAND_OK) fail(PQresultErrorMessage(r));
    PQclear(r);
    while ((r = PQgetResult(conn))) PQclear(r);
    r = PQexecPrepared(conn, "insert_staged", 0, nullptr, nullptr, nullptr, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) fail(PQresultErrorMessage(r));
    PQclear(r);
    exec(conn, "COMMIT");
  }

  void write(PGconn* conn, const std::vector<PendingRow>& rows) const {
    if (copy_staging_) return write_by_copy(conn, rows);
    PGresult* r = nullptr;
    if (values_form_) {
      std::string sql = "INSERT INTO \"" + table_ + "\" (hash, message_id, document) VALUES ";
      std::vector<const char*> values;
      for (std::size_t i = 0; i < rows.size(); ++i) {
        sql += (i ? ",($" : "($") + std::to_string(3 * i + 1) + ",$" + std::to_string(3 * i + 2) +
               ",$" + std::to_string(3 * i + 3) + "::jsonb)";
        values.push_back(rows[i].hash->c_str());
        values.push_back(rows[i].message_id.c_str());
        values.push_back(rows[i].document->c_str());
      }
      sql += " ON CONFLICT (hash) DO NOTHING RETURNING hash";
      r = PQexecParams(conn, sql.c_str(), static_cast<int>(values.size()), nullptr, values.data(),
                       nullptr, nullptr, 0);
    } else {
      std::vector<std::string_view> hashes, ids, documents;
      std::vector<std::string> jsonb;  // jsonb's binary format: a version byte, the text
      jsonb.reserve(rows.size());
      // Seed 001's rejected design: ask which records are there, insert the others (a
      // second round trip; ON CONFLICT still settles the writers' races).
      std::unordered_set<std::string> known;
      if (select_first_) {
        std::vector<std::string_view> all;
        for (const auto& row : rows) all.push_back(*row.hash);
        const std::string array = binary_array(25, all);
        const char* values[] = {array.data()};
        const int lengths[] = {static_cast<int>(array.size())};
        const int formats[] = {1};
        PGresult* found = PQexecPrepared(conn, "select_known", 1, values, lengths, formats, 0);
        if (PQresultStatus(found) != PGRES_TUPLES_OK) fail(PQresultErrorMessage(found));
        for (int i = 0; i < PQntuples(found); ++i) known.insert(PQgetvalue(found, i, 0));
        PQclear(found);
      }
      for (const auto& row : rows) {
        if (known.count(*row.hash)) continue;
        hashes.push_back(*row.hash);
        ids.push_back(row.message_id);
        documents.push_back(jsonb.emplace_back("\x01" + *row.document));
      }
      if (hashes.empty()) return;  // every one was known: nothing to insert
      const std::string arrays[] = {binary_array(25, hashes), binary_array(25, ids),
                                    binary_array(3802, documents)};
      const char* values[] = {arrays[0].data(), arrays[1].data(), arrays[2].data()};
      const int lengths[] = {static_cast<int>(arrays[0].size()), static_cast<int>(arrays[1].size()),
                             static_cast<int>(arrays[2].size())};
      const int formats[] = {1, 1, 1};
      r = PQexecPrepared(conn, "insert_rows", 3, values, lengths, formats, 0);
    }
    if (PQresultStatus(r) != PGRES_TUPLES_OK) fail(PQresultErrorMessage(r));
    PQclear(r);
  }

  const std::string dsn_, table_;
  const std::chrono::milliseconds batch_wait_;
  const std::size_t rows_per_insert_;
  const bool values_form_, select_first_, copy_staging_;
  std::function<void(std::vector<PendingRow>&&)> written_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<PendingRow> pending_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace sluice::bench
