// PostgreSQL: one multi-row INSERT ... ON CONFLICT (hash) DO NOTHING RETURNING hash
// per batch (one round trip); the document as JSONB plus configured typed columns.
#include <libpq-fe.h>

#include <algorithm>
#include <set>

#include "sinks/sink.hpp"
#include "sinks/sql.hpp"

namespace sluice::sinks {
namespace {

const char* sql_type(pipeline::FieldType type) {
  switch (type) {
    case pipeline::FieldType::string:
      return "text";
    case pipeline::FieldType::integer:
      return "bigint";
    case pipeline::FieldType::number:
      return "double precision";
    case pipeline::FieldType::boolean:
      return "boolean";
    case pipeline::FieldType::json:
      return "jsonb";
  }
  return "text";
}

class PostgresSink final : public Sink {
 public:
  explicit PostgresSink(PostgresOptions options) : options_(std::move(options)) {}
  ~PostgresSink() override {
    if (conn_) PQfinish(conn_);
  }

  void open() override {
    if (conn_) PQfinish(conn_);
    const std::string dsn =
        options_.dsn + " connect_timeout=" + std::to_string(options_.connect_timeout.count());
    conn_ = PQconnectdb(dsn.c_str());
    if (PQstatus(conn_) != CONNECTION_OK) fail("connect");
    // "relation already exists, skipping" and friends: not worth a line on stderr.
    PQsetNoticeProcessor(
        conn_, [](void*, const char*) {}, nullptr);
    std::string columns;
    for (const auto& c : options_.columns)
      columns += ", " + sql_identifier(c.field) + " " + sql_type(c.type);
    // Several processes starting at once race on CREATE ... IF NOT EXISTS (PostgreSQL
    // reports "already exists" to the loser): the DDL runs under an advisory lock.
    exec("SELECT pg_advisory_lock(5391) /* sluice DDL */");
    try {
      exec("CREATE TABLE IF NOT EXISTS " + sql_identifier(options_.table) +
           " (hash text NOT NULL, message_id text, document jsonb NOT NULL,"
           " written_at timestamptz NOT NULL DEFAULT now()" +
           columns + ")");
      exec("CREATE UNIQUE INDEX IF NOT EXISTS " +
           sql_identifier("uniq_" + options_.table + "_hash") + " ON " +
           sql_identifier(options_.table) + " (hash)");
      exec("CREATE TABLE IF NOT EXISTS " + sql_identifier(options_.rejects_table) +
           " (id bigserial PRIMARY KEY, message_id text, reason text NOT NULL, detail text, body "
           "text,"
           " source text, rejected_at timestamptz NOT NULL DEFAULT now())");
    } catch (...) {
      PQclear(PQexec(conn_, "SELECT pg_advisory_unlock(5391)"));
      throw;
    }
    exec("SELECT pg_advisory_unlock(5391)");
  }

  std::vector<WriteOutcome> write(std::span<const pipeline::Record> input) override {
    ensure_open();
    // Rows in hash order: concurrent writers (other processes too) then take the
    // unique index's locks in the same order and cannot deadlock each other.
    std::vector<std::size_t> order(input.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(),
              [&](std::size_t a, std::size_t b) { return input[a].hash < input[b].hash; });
    std::vector<const pipeline::Record*> records;  // no copies of the documents
    records.reserve(input.size());
    for (std::size_t i : order) records.push_back(&input[i]);
    // One multi-row INSERT per chunk of rows; all chunks go out in libpq's pipeline
    // mode with a single sync: one round trip for the whole batch, and statements
    // that stay far below PostgreSQL's 65,535-parameter limit.
    std::vector<Statement> statements;
    for (std::size_t start = 0; start < records.size(); start += kRowsPerStatement)
      statements.push_back(insert_statement(
          std::span(records).subspan(start, std::min(kRowsPerStatement, records.size() - start))));
    std::multiset<std::string> inserted = statements.size() == 1
                                              ? run_single(statements.front(), records.size())
                                              : run_pipelined(statements, records.size());
    std::vector<WriteOutcome> outcomes(input.size(), WriteOutcome::duplicate);
    for (std::size_t i = 0; i < input.size(); ++i) {
      // The same hash twice in one batch: the first is the insert, the second a duplicate.
      auto it = inserted.find(input[i].hash);
      if (it != inserted.end()) {
        inserted.erase(it);
        outcomes[i] = WriteOutcome::inserted;
      }
    }
    return outcomes;
  }

  static constexpr std::size_t kRowsPerStatement = 200;

  struct Statement {
    std::string sql;
    std::vector<std::string> storage;  // owns what `values` points to
    std::vector<const char*> values;
  };

  Statement insert_statement(std::span<const pipeline::Record* const> rows) const {
    const std::size_t per_row = 3 + options_.columns.size();
    Statement st;
    st.sql = "INSERT INTO " + sql_identifier(options_.table) + " (hash, message_id, document";
    for (const auto& c : options_.columns) st.sql += ", " + sql_identifier(c.field);
    st.sql += ") VALUES ";
    st.storage.reserve(rows.size() * per_row);  // no reallocation: c_str() pointers stay valid
    st.values.reserve(rows.size() * per_row);
    int n = 0;
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const auto& r = *rows[i];
      st.sql += i ? ",(" : "(";
      for (std::size_t k = 0; k < per_row; ++k) {
        st.sql += (k ? ",$" : "$") + std::to_string(++n);
        if (k == 2) st.sql += "::jsonb";
      }
      st.sql += ")";
      for (std::string value : {r.hash, r.message_id, r.document.dump()}) {
        st.storage.push_back(std::move(value));
        st.values.push_back(st.storage.back().c_str());
      }
      for (const auto& c : options_.columns) {
        auto it = r.document.find(c.field);
        if (it == r.document.end() || it->is_null()) {
          st.values.push_back(nullptr);
          continue;
        }
        st.storage.push_back(it->is_string() ? it->get<std::string>() : it->dump());
        st.values.push_back(st.storage.back().c_str());
      }
    }
    st.sql += " ON CONFLICT (hash) DO NOTHING RETURNING hash";
    return st;
  }

  static void collect(PGresult* res, std::multiset<std::string>& inserted) {
    for (int row = 0; row < PQntuples(res); ++row) inserted.insert(PQgetvalue(res, row, 0));
  }

  std::multiset<std::string> run_single(const Statement& st, std::size_t rows) {
    PGresult* res = PQexecParams(conn_, st.sql.c_str(), static_cast<int>(st.values.size()), nullptr,
                                 st.values.data(), nullptr, nullptr, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
      const std::string error = PQresultErrorMessage(res);
      PQclear(res);
      fail("insert of " + std::to_string(rows) + " records", error);
    }
    std::multiset<std::string> inserted;
    collect(res, inserted);
    PQclear(res);
    return inserted;
  }

  std::multiset<std::string> run_pipelined(const std::vector<Statement>& statements,
                                           std::size_t rows) {
    if (!PQenterPipelineMode(conn_)) fail("enter pipeline mode");
    // Statements up to a sync share an implicit transaction: all chunks are written
    // or none (a failed chunk rolls back the ones before it and skips the rest).
    bool sent = true;
    for (const auto& st : statements)
      sent = sent && PQsendQueryParams(conn_, st.sql.c_str(), static_cast<int>(st.values.size()),
                                       nullptr, st.values.data(), nullptr, nullptr, 0);
    sent = sent && PQpipelineSync(conn_);
    std::multiset<std::string> inserted;
    std::string error;
    if (!sent) error = PQerrorMessage(conn_);
    // Results: one per query (each followed by a null), then the sync.
    while (sent) {
      PGresult* res = PQgetResult(conn_);
      if (!res) continue;  // end of one query's results
      const auto status = PQresultStatus(res);
      if (status == PGRES_PIPELINE_SYNC) {
        PQclear(res);
        break;
      }
      if (status == PGRES_TUPLES_OK)
        collect(res, inserted);
      else if (status != PGRES_COMMAND_OK && error.empty())
        error = status == PGRES_PIPELINE_ABORTED ? "pipeline aborted" : PQresultErrorMessage(res);
      PQclear(res);
      if (PQstatus(conn_) != CONNECTION_OK) {
        if (error.empty()) error = PQerrorMessage(conn_);
        break;
      }
    }
    if (PQstatus(conn_) == CONNECTION_OK) PQexitPipelineMode(conn_);
    if (!error.empty()) fail("pipelined insert of " + std::to_string(rows) + " records", error);
    return inserted;
  }

  void write_rejects(std::span<const RejectRow> rows) override {
    ensure_open();
    for (const auto& row : rows) {
      const char* values[] = {row.message_id.c_str(), row.reason.c_str(), row.detail.c_str(),
                              row.body.c_str(), row.source.c_str()};
      PGresult* res =
          PQexecParams(conn_,
                       ("INSERT INTO " + sql_identifier(options_.rejects_table) +
                        " (message_id, reason, detail, body, source) VALUES ($1,$2,$3,$4,$5)")
                           .c_str(),
                       5, nullptr, values, nullptr, nullptr, 0);
      const bool ok = PQresultStatus(res) == PGRES_COMMAND_OK;
      const std::string error = ok ? "" : PQresultErrorMessage(res);
      PQclear(res);
      if (!ok) fail("insert reject", error);
    }
  }

  std::uint64_t count_records() override {
    ensure_open();
    PGresult* res =
        PQexec(conn_, ("SELECT count(*) FROM " + sql_identifier(options_.table)).c_str());
    std::uint64_t n = 0;
    if (PQresultStatus(res) == PGRES_TUPLES_OK) n = std::stoull(PQgetvalue(res, 0, 0));
    PQclear(res);
    return n;
  }

  std::string describe() const override { return "postgres:" + options_.table; }

 private:
  void ensure_open() {
    if (!conn_ || PQstatus(conn_) != CONNECTION_OK) open();
  }
  [[noreturn]] void fail(const std::string& what, std::string error = {}) {
    if (error.empty()) error = conn_ ? PQerrorMessage(conn_) : "no connection";
    while (!error.empty() && (error.back() == '\n' || error.back() == ' ')) error.pop_back();
    const bool unavailable = !conn_ || PQstatus(conn_) != CONNECTION_OK;
    throw SinkError("PostgreSQL " + what + ": " + error, unavailable);
  }
  void exec(const std::string& sql) {
    PGresult* res = PQexec(conn_, sql.c_str());
    const auto status = PQresultStatus(res);
    const std::string error = PQresultErrorMessage(res);
    PQclear(res);
    if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK)
      fail("'" + sql.substr(0, 50) + "'", error);
  }

  PostgresOptions options_;
  PGconn* conn_ = nullptr;
};

}  // namespace

std::unique_ptr<Sink> make_postgres_sink(PostgresOptions options) {
  return std::make_unique<PostgresSink>(std::move(options));
}

}  // namespace sluice::sinks
