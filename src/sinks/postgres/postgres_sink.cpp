// PostgreSQL: one INSERT ... SELECT FROM unnest(arrays) ON CONFLICT (hash) DO NOTHING
// RETURNING hash per table and batch, prepared once per connection, all of a batch in one
// round trip; the document as JSONB plus configured typed columns.
// Every call is bounded (sinks/postgres/session.hpp: libpq non-blocking, each wait with
// a deadline, interruptible).
#include "sinks/postgres/postgres_sink.hpp"

#include <libpq-fe.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <tuple>

#include "common/crypto.hpp"
#include "common/redact.hpp"
#include "sinks/postgres/session.hpp"
#include "sinks/postgres/wire.hpp"
#include "sinks/sql.hpp"

namespace sluice::sinks {
namespace {
using namespace postgres;

std::string column_name(const Column& column) {
  std::string name = column.field;
  std::replace(name.begin(), name.end(), '.', '_');
  return sql_identifier(name);
}

class PostgresSink final : public Sink {
 public:
  explicit PostgresSink(PostgresOptions options)
      : options_(std::move(options)),
        session_(options_.dsn, options_.connect_timeout, options_.query_timeout,
                 "postgres:" + options_.table) {
    tables_.push_back(options_.table);
    tables_.insert(tables_.end(), options_.routes.begin(), options_.routes.end());
  }

  void open() override {
    try {
      connect_and_prepare();
    } catch (...) {
      session_.close();  // half open (tables made, statements not prepared) is not open
      throw;
    }
  }

  void connect_and_prepare() {
    session_.connect();
    std::string columns;
    for (const auto& c : options_.columns)
      columns += ", " + column_name(c) + " " + sql_type(c.type);
    // Several processes starting at once race on CREATE ... IF NOT EXISTS (PostgreSQL
    // reports "already exists" to the loser): the DDL runs under an advisory lock.
    session_.exec("SELECT pg_advisory_lock(5391) /* sluice DDL */");
    try {
      for (const auto& table : tables()) {
        session_.exec("CREATE TABLE IF NOT EXISTS " + sql_identifier(table) +
                      " (hash text NOT NULL, message_id text, document jsonb NOT NULL,"
                      " written_at timestamptz NOT NULL DEFAULT now()" +
                      columns + ")");
        session_.exec("CREATE UNIQUE INDEX IF NOT EXISTS " +
                      sql_identifier("uniq_" + table + "_hash") + " ON " + sql_identifier(table) +
                      " (hash)");
      }
      session_.exec(
          "CREATE TABLE IF NOT EXISTS " + sql_identifier(options_.rejects_table) +
          " (id bigserial PRIMARY KEY, message_id text, reason text NOT NULL, detail text, body "
          "text,"
          " source text, rejected_at timestamptz NOT NULL DEFAULT now(), replayed_at timestamptz,"
          " properties text, pipeline text, body_sha256 text)");
      // A rejects table of an earlier release gets the columns; asked first, as ALTER
      // TABLE locks the table even when it has nothing to do.
      const std::string rejects = sql_identifier(options_.rejects_table);
      if (session_.first_value(
              "SELECT count(*)::text FROM pg_attribute WHERE attrelid = to_regclass($1) "
              "AND attname IN ('replayed_at', 'properties', 'pipeline', 'body_sha256') "
              "AND NOT attisdropped",
              rejects, "rejects table's columns") != "4")
        session_.exec(
            "ALTER TABLE " + rejects +
            " ADD COLUMN IF NOT EXISTS replayed_at timestamptz,"
            " ADD COLUMN IF NOT EXISTS properties text, ADD COLUMN IF NOT EXISTS pipeline text,"
            " ADD COLUMN IF NOT EXISTS body_sha256 text");
      // One row per message, reason, pipeline and body (rows of earlier releases have no
      // pipeline, NULL: distinct from any other, so they never stop the index being
      // made; nor do messages without an id).
      // Asked first: CREATE INDEX IF NOT EXISTS waits for the table's writers even when
      // the index is there.
      const std::string index = sql_identifier("uniq_" + options_.rejects_table + "_message");
      if (session_.first_value("SELECT (to_regclass($1) IS NOT NULL)::text", index,
                               "rejects table's index") != "true")
        session_.exec("CREATE UNIQUE INDEX IF NOT EXISTS " + index + " ON " + rejects +
                      " (pipeline, message_id, reason, body_sha256)");
    } catch (...) {
      if (session_.connected()) {
        try {
          session_.exec("SELECT pg_advisory_unlock(5391)");
        } catch (const SinkError&) {
        }
      }
      throw;
    }
    session_.exec("SELECT pg_advisory_unlock(5391)");
    read_column_types();
    statements_.clear();
    for (const auto& table : tables()) statements_.push_back(insert_sql(table));
    if (session_.use_prepared())
      for (std::size_t route = 0; route < tables().size(); ++route) prepare(route);
  }

  // The typed columns' types as the table has them (it may predate the configuration, or
  // be the user's own): the arrays are cast to those, as a VALUES list's parameters were.
  void read_column_types() {
    column_types_.assign(tables().size(), {});
    if (options_.columns.empty()) return;
    for (std::size_t route = 0; route < tables().size(); ++route) {
      Statement st;
      st.sql =
          "SELECT attname || chr(9) || format_type(atttypid, atttypmod) FROM pg_attribute "
          "WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped";
      const std::string table = sql_identifier(tables()[route]);
      st.values = {table.c_str()};
      session_.send(st);
      std::vector<std::string> rows;
      session_.collect_results(rows, "column types of " + tables()[route]);
      for (const auto& row : rows) {
        const auto tab = row.find('\t');
        if (tab != std::string::npos)
          column_types_[route][row.substr(0, tab)] = row.substr(tab + 1);
      }
    }
  }

  // Named by a digest of its text (the table, the columns and their types): a pooler in
  // transaction mode can hand us a server connection that prepared it already, for this
  // process or another one, and it is then the very same statement.
  void prepare(std::size_t route) {
    const auto& sql = statements_[route];
    const std::string name = prepared_name(sql);
    if (!PQsendPrepare(session_.raw(), name.c_str(), sql.c_str(), 0, nullptr))
      session_.fail("prepare");
    session_.flush(Clock::now() + options_.query_timeout);
    const auto deadline = Clock::now() + options_.query_timeout;
    std::string error, state;
    while (PGresult* res = session_.next_result(deadline)) {
      if (PQresultStatus(res) != PGRES_COMMAND_OK && error.empty()) {
        error = PQresultErrorMessage(res);
        const char* code = PQresultErrorField(res, PG_DIAG_SQLSTATE);
        state = code ? code : "";
      }
      PQclear(res);
    }
    if (PQstatus(session_.raw()) != CONNECTION_OK) session_.fail("prepare");
    if (error.empty() || state == "42P05") return;  // 42P05: duplicate_prepared_statement
    session_.throw_error("prepare of the insert into " + tables()[route], error,
                         classify_sqlstate(state));
  }

  WriteResult write(std::span<const pipeline::Record> input) override {
    return write_with_positions(input, {});
  }
  bool positions_with_records() const override { return true; }

  WriteResult write_with_positions(std::span<const pipeline::Record> input,
                                   std::span<const PositionUpdate> positions) override {
    if (positions.empty())
      ensure_open();
    else
      ensure_positions();
    // Rows by table, then in hash order: concurrent writers (other processes too) then
    // take the unique indexes' locks in the same order and cannot deadlock each other.
    // Not with records of ordered groups: a group's rows keep their sequence. Those have
    // no such risk (a FIFO group is held by one writer of one consumer at a time); a
    // deadlock on content shared across groups is detected and the batch retried.
    std::vector<std::size_t> order(input.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    const bool keep_order = std::ranges::any_of(input, &pipeline::Record::ordered);
    // Stable: of two records with one hash, the earlier is the row that is inserted.
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      if (keep_order) return input[a].route < input[b].route;
      return std::tie(input[a].route, input[a].hash) < std::tie(input[b].route, input[b].hash);
    });
    std::vector<const pipeline::Record*> records;  // no copies of the documents
    records.reserve(input.size());
    for (std::size_t i : order) records.push_back(&input[i]);
    // One INSERT per table (and per kStatementBytes of rows); all go out in libpq's
    // pipeline mode with a single sync: one round trip (one transaction) for the batch,
    // the positions it brings forward first.
    std::vector<Statement> statements;
    for (const auto& p : positions) statements.push_back(position_statement(p.key, p.value));
    for (std::size_t start = 0; start < records.size();) {
      const auto route = records[start]->route;
      std::size_t end = start;
      while (end < records.size() && records[end]->route == route) ++end;
      std::size_t used = 0;
      statements.push_back(
          insert_statement(route, std::span(records).subspan(start, end - start), used));
      start += used;
    }
    if (statements.empty()) return {};
    std::vector<std::string> inserted = statements.size() == 1
                                            ? run_single(statements.front(), records.size())
                                            : run_pipelined(statements, records.size());
    // The hashes RETURNING gave back and the rows, both in hash order: one merge (a
    // hash is in one table only: the route is a function of the identity).
    std::sort(inserted.begin(), inserted.end());
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return input[a].hash < input[b].hash; });
    WriteResult result;
    result.outcomes.assign(input.size(), WriteOutcome::duplicate);
    std::size_t next = 0;
    for (std::size_t i : order) {
      while (next < inserted.size() && inserted[next] < input[i].hash) ++next;
      if (next == inserted.size()) break;
      if (inserted[next] == input[i].hash) {
        result.outcomes[i] = WriteOutcome::inserted;
        ++next;
      }
    }
    return result;
  }

  static constexpr std::size_t kStatementBytes = 64u << 20;
  static constexpr std::size_t kMaxMessageBytes = (1u << 30) - (1u << 20);

  // The insert of one table: a fixed statement whose rows come as one array per column
  // (unnest), prepared once per connection. PostgreSQL then neither parses nor plans per
  // batch: the server's CPU per record is measured against the multi-row VALUES with
  // 3 parameters per row sent before (BENCHMARKS.md, bench_pipeline's ceiling-db-values).
  // What a typed column's array is cast to: the table's own type, else the configured one.
  std::string column_type(const std::string& table, const Column& column) const {
    const auto route = static_cast<std::size_t>(std::find(tables().begin(), tables().end(), table) -
                                                tables().begin());
    if (route < column_types_.size()) {
      std::string name = column.field;
      std::replace(name.begin(), name.end(), '.', '_');
      const auto found = column_types_[route].find(name);
      if (found != column_types_[route].end()) return found->second;
    }
    return sql_type(column.type);
  }

  std::string insert_sql(const std::string& table) const {
    std::string into = "hash, message_id, document", select = "u.h, u.m, u.d",
                arrays = "$1::text[], $2::text[], $3::jsonb[]", names = "h, m, d";
    int n = 3;
    for (const auto& c : options_.columns) {
      const std::string name = "c" + std::to_string(++n);
      into += ", " + column_name(c);
      select += c.epoch_ms ? ", timestamptz 'epoch' + interval '1 millisecond' * u." + name
                           : ", u." + name;
      arrays +=
          ", $" + std::to_string(n) + "::" + (c.epoch_ms ? "bigint" : column_type(table, c)) + "[]";
      names += ", " + name;
    }
    return "INSERT INTO " + sql_identifier(table) + " (" + into + ") SELECT " + select +
           " FROM unnest(" + arrays + ") AS u(" + names +
           ") ON CONFLICT (hash) DO NOTHING RETURNING hash";
  }

  // Rows of one table from the front of `rows`, as many as fit kStatementBytes (at least
  // one); `used` says how many.
  Statement insert_statement(std::size_t route, std::span<const pipeline::Record* const> rows,
                             std::size_t& used) const {
    constexpr std::uint32_t kText = 25, kJsonb = 3802;  // pg_type OIDs
    Statement st;
    st.sql = statements_.at(route);
    if (session_.use_prepared()) st.prepared = prepared_name(st.sql);
    BinaryArray hashes(kText, rows.size() * 68);
    BinaryArray ids(kText, rows.size() * 44);
    BinaryArray documents(kJsonb, rows.size() * 320);
    std::vector<std::string> columns(options_.columns.size(), "{");
    std::size_t bytes = 0;
    for (used = 0; used < rows.size() && bytes < kStatementBytes; ++used) {
      const auto& r = *rows[used];
      // The arrays copy the strings: one buffer per column is what the protocol sends.
      hashes.add(r.hash);
      // Up to a NUL, as libpq's text parameters always took it (the server refuses one).
      ids.add(std::string_view(r.message_id.c_str()));
      documents.add_with("\x01", [&](std::string& out) {  // jsonb's binary format: version 1
        nlohmann::detail::serializer<nlohmann::ordered_json> writer(
            nlohmann::detail::output_adapter<char>(out), ' ');
        writer.dump(r.document, false, false, 0);
      });
      bytes = hashes.bytes() + ids.bytes() + documents.bytes();
      for (std::size_t k = 0; k < options_.columns.size(); ++k) {
        append_array_element(columns[k],
                             pipeline::find_field(r.document, options_.columns[k].field));
        bytes += columns[k].size();
      }
    }
    // PostgreSQL takes a message of less than 1 GiB; past it, it drops the connection.
    if (bytes >= kMaxMessageBytes)
      throw SinkError("PostgreSQL insert of " + std::to_string(used) +
                          " record(s): " + std::to_string(bytes) +
                          " bytes, more than PostgreSQL takes in one message (1 GiB)",
                      SinkFailure::refused);
    st.storage.push_back(hashes.take());
    st.storage.push_back(ids.take());
    st.storage.push_back(documents.take());
    for (auto& literal : columns) st.storage.push_back(std::move(literal += "}"));
    for (std::size_t k = 0; k < st.storage.size(); ++k) {
      const bool binary = k < 3;
      st.values.push_back(st.storage[k].c_str());
      st.lengths.push_back(binary ? static_cast<int>(st.storage[k].size()) : 0);
      st.formats.push_back(binary ? 1 : 0);
    }
    return st;
  }

  static std::string prepared_name(const std::string& sql) {
    return "sluice_insert_" + crypto::sha256_hex(sql).substr(0, 24);
  }

  std::vector<std::string> run_single(const Statement& st, std::size_t rows) {
    session_.send(st);
    std::vector<std::string> inserted;
    session_.collect_results(inserted, "insert of " + std::to_string(rows) + " records");
    return inserted;
  }

  std::vector<std::string> run_pipelined(const std::vector<Statement>& statements,
                                         std::size_t rows) {
    if (!PQenterPipelineMode(session_.raw())) session_.fail("enter pipeline mode");
    // Statements up to a sync share an implicit transaction: all are written or none (a
    // failed one rolls back the ones before it and skips the rest).
    for (const auto& st : statements)
      if (!session_.dispatch(st)) session_.fail("pipelined insert");
    if (!PQpipelineSync(session_.raw())) session_.fail("pipeline sync");
    const auto deadline = Clock::now() + options_.query_timeout;
    session_.flush(deadline);
    std::vector<std::string> inserted;
    std::string error;
    SinkFailure kind = SinkFailure::transient;
    // Results: one per query (each followed by a null), then the sync.
    for (;;) {
      PGresult* res = session_.next_result(deadline);
      if (!res) continue;  // end of one query's results
      const auto status = PQresultStatus(res);
      if (status == PGRES_PIPELINE_SYNC) {
        PQclear(res);
        break;
      }
      if (status == PGRES_TUPLES_OK) {
        Session::collect(res, inserted);
      } else if (status != PGRES_COMMAND_OK && error.empty() && status != PGRES_PIPELINE_ABORTED) {
        error = PQresultErrorMessage(res);
        kind = session_.classify(res);
      }
      PQclear(res);
      if (PQstatus(session_.raw()) != CONNECTION_OK) session_.fail("pipelined insert");
    }
    PQexitPipelineMode(session_.raw());
    if (!error.empty())
      session_.throw_error("pipelined insert of " + std::to_string(rows) + " records", error, kind);
    return inserted;
  }

  void write_rejects(std::span<const RejectRow> rows) override {
    ensure_open();
    for (const auto& row : rows) {
      const std::string body_sha256 = crypto::sha256_hex(row.body);
      const char* values[] = {row.message_id.c_str(), row.reason.c_str(), row.detail.c_str(),
                              row.body.c_str(),       row.source.c_str(), row.properties.c_str(),
                              row.pipeline.c_str(),   body_sha256.c_str()};
      Statement st;
      st.sql = "INSERT INTO " + sql_identifier(options_.rejects_table) +
               " (message_id, reason, detail, body, source, properties, pipeline, body_sha256)"
               " VALUES (NULLIF($1,''),$2,$3,$4,$5,NULLIF($6,''),$7,$8)"
               " ON CONFLICT DO NOTHING";
      st.values.assign(std::begin(values), std::end(values));
      session_.send(st);
      std::vector<std::string> none;
      session_.collect_results(none, "insert reject");
    }
  }

  std::vector<StoredReject> read_rejects(const RejectQuery& query) override {
    ensure_open();
    // Each row as one JSON array: the first column is all session_.collect_results() reads.
    const std::string limit = std::to_string(query.limit);
    const std::string after = query.after_id.empty() ? "0" : query.after_id;
    const char* replayed = query.replayed ? "true" : "false";
    const char* utc = "'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'";
    Statement st;
    st.sql = std::string(
                 "SELECT json_build_array(id::text, message_id, reason, detail, body, "
                 "source, to_char(rejected_at AT TIME ZONE 'UTC', ") +
             utc + "), coalesce(to_char(replayed_at AT TIME ZONE 'UTC', " + utc +
             "), ''), properties, pipeline)::text FROM " + sql_identifier(options_.rejects_table) +
             " WHERE id > $1::bigint AND ($2 = '' OR reason = $2) AND ($3::boolean OR "
             "replayed_at IS NULL) AND ($5 = '' OR pipeline = $5) ORDER BY id LIMIT $4::bigint";
    st.values = {after.c_str(), query.reason.c_str(), replayed, limit.c_str(),
                 query.pipeline.c_str()};
    session_.send(st);
    std::vector<std::string> lines;
    session_.collect_results(lines, "read rejects");
    std::vector<StoredReject> rows;
    for (const auto& line : lines) {
      const auto a = nlohmann::json::parse(line);
      auto at = [&](int i) { return a[i].is_string() ? a[i].get<std::string>() : std::string(); };
      rows.push_back({at(0), {at(1), at(2), at(3), at(4), at(5), at(8), at(9)}, at(6), at(7)});
    }
    return rows;
  }

  void mark_replayed(std::span<const std::string> ids) override {
    ensure_open();
    std::string list = "{";
    for (const auto& id : ids)
      list += (list.size() > 1 ? "," : "") + std::to_string(std::stoll(id));
    list += "}";
    Statement st;
    st.sql = "UPDATE " + sql_identifier(options_.rejects_table) +
             " SET replayed_at = now() WHERE id = ANY($1::bigint[])";
    st.values = {list.c_str()};
    session_.send(st);
    std::vector<std::string> none;
    session_.collect_results(none, "mark replayed");
  }

  std::uint64_t count_records() override {
    ensure_open();
    Statement st;
    for (const auto& table : tables())
      st.sql += (st.sql.empty() ? "SELECT (" : " + ") + std::string("(SELECT count(*) FROM ") +
                sql_identifier(table) + ")";
    st.sql += ")::text";
    session_.send(st);
    std::vector<std::string> counts;
    session_.collect_results(counts, "count");
    return counts.empty() ? 0 : std::stoull(*counts.begin());
  }

  std::optional<std::string> load_position(const std::string& key) override {
    ensure_positions();
    return session_.first_value("SELECT position FROM sluice_positions WHERE key = $1", key,
                                "read a position");
  }

  void save_position(const std::string& key, const std::string& value) override {
    ensure_positions();
    session_.send(position_statement(key, value));
    std::vector<std::string> none;
    session_.collect_results(none, "save a position");
  }

  std::string describe() const override { return "postgres:" + options_.table; }

  static Statement position_statement(const std::string& key, const std::string& value) {
    Statement st;
    st.sql =
        "INSERT INTO sluice_positions (key, position) VALUES ($1, $2) ON CONFLICT (key) DO "
        "UPDATE SET position = EXCLUDED.position, saved_at = now()";
    st.storage = {key, value};
    st.values = {st.storage[0].c_str(), st.storage[1].c_str()};
    return st;
  }

  void interrupt() override { session_.interrupt(); }

 private:
  void ensure_open() {
    if (!session_.connected()) open();
  }
  void ensure_positions() {
    ensure_open();
    if (positions_made_on_ == session_.generation()) return;
    session_.exec(
        "CREATE TABLE IF NOT EXISTS sluice_positions (key text PRIMARY KEY, position text NOT "
        "NULL, saved_at timestamptz NOT NULL DEFAULT now())");
    positions_made_on_ = session_.generation();
  }
  const std::vector<std::string>& tables() const { return tables_; }
  PostgresOptions options_;
  std::vector<std::string> tables_;  // sink.table, then the routed tables: by Record::route
  Session session_;
  std::uint64_t positions_made_on_ = 0;  // the connection sluice_positions was made on
  std::vector<std::string> statements_;  // the insert of each table, by Record::route
  std::vector<std::map<std::string, std::string>> column_types_;  // by route: name -> type
};

}  // namespace

std::unique_ptr<Sink> make_postgres_sink(PostgresOptions options) {
  return std::make_unique<PostgresSink>(std::move(options));
}

}  // namespace sluice::sinks
