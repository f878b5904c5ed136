// PostgreSQL: one INSERT ... SELECT FROM unnest(arrays) ON CONFLICT (hash) DO NOTHING
// RETURNING hash per table and batch, prepared once per connection, all of a batch in one
// round trip; the document as JSONB plus configured typed columns.
// Every call is bounded: libpq runs non-blocking and we wait on its socket with a
// deadline (query_timeout), so a frozen server or network never holds a writer, and
// interrupt() makes a waiting call return within a poll slice.
#include "sinks/postgres/postgres_sink.hpp"

#include <libpq-fe.h>
#include <poll.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <tuple>

#include "common/crypto.hpp"
#include "common/redact.hpp"
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

using Clock = std::chrono::steady_clock;

class PostgresSink final : public Sink {
 public:
  explicit PostgresSink(PostgresOptions options) : options_(std::move(options)) {
    tables_.push_back(options_.table);
    tables_.insert(tables_.end(), options_.routes.begin(), options_.routes.end());
  }
  ~PostgresSink() override { close(); }

  void open() override {
    try {
      connect_and_prepare();
    } catch (...) {
      close();  // half open (tables made, statements not prepared) is not open
      throw;
    }
  }

  void connect_and_prepare() {
    close();
    // Our defaults first, the user's connection string (expanded from "dbname") after:
    // what the user sets wins. Keepalives and tcp_user_timeout notice a dead peer.
    const std::string timeout_ms = std::to_string(options_.query_timeout.count());
    const char* keys[] = {"keepalives",
                          "keepalives_idle",
                          "keepalives_interval",
                          "keepalives_count",
                          "tcp_user_timeout",
                          "fallback_application_name",
                          "dbname",
                          nullptr};
    const char* values[] = {
        "1", "10", "5", "3", timeout_ms.c_str(), "sluice", options_.dsn.c_str(), nullptr};
    conn_ = PQconnectStartParams(keys, values, /*expand_dbname=*/1);
    if (!conn_ || PQstatus(conn_) == CONNECTION_BAD) fail("connect");
    const auto deadline = Clock::now() + options_.connect_timeout;
    for (auto status = PGRES_POLLING_WRITING; status != PGRES_POLLING_OK;) {
      if (status == PGRES_POLLING_FAILED) fail("connect");
      wait_socket(status == PGRES_POLLING_READING ? POLLIN : POLLOUT, deadline, "connect",
                  "sink.postgres.connect_timeout",
                  std::chrono::duration_cast<std::chrono::milliseconds>(options_.connect_timeout));
      status = PQconnectPoll(conn_);
    }
    PQsetnonblocking(conn_, 1);
    // "relation already exists, skipping" and friends: not worth a line on stderr.
    PQsetNoticeProcessor(
        conn_, [](void*, const char*) {}, nullptr);
    // The server stops a statement when we stop waiting for it. A SET, not the
    // "options" startup parameter, which connection poolers such as PgBouncer refuse.
    exec("SET statement_timeout = " + timeout_ms);
    std::string columns;
    for (const auto& c : options_.columns)
      columns += ", " + column_name(c) + " " + sql_type(c.type);
    // Several processes starting at once race on CREATE ... IF NOT EXISTS (PostgreSQL
    // reports "already exists" to the loser): the DDL runs under an advisory lock.
    exec("SELECT pg_advisory_lock(5391) /* sluice DDL */");
    try {
      for (const auto& table : tables()) {
        exec("CREATE TABLE IF NOT EXISTS " + sql_identifier(table) +
             " (hash text NOT NULL, message_id text, document jsonb NOT NULL,"
             " written_at timestamptz NOT NULL DEFAULT now()" +
             columns + ")");
        exec("CREATE UNIQUE INDEX IF NOT EXISTS " + sql_identifier("uniq_" + table + "_hash") +
             " ON " + sql_identifier(table) + " (hash)");
      }
      exec("CREATE TABLE IF NOT EXISTS " + sql_identifier(options_.rejects_table) +
           " (id bigserial PRIMARY KEY, message_id text, reason text NOT NULL, detail text, body "
           "text,"
           " source text, rejected_at timestamptz NOT NULL DEFAULT now(), replayed_at timestamptz,"
           " properties text, pipeline text, body_sha256 text)");
      // A rejects table of an earlier release gets the columns; asked first, as ALTER
      // TABLE locks the table even when it has nothing to do.
      const std::string rejects = sql_identifier(options_.rejects_table);
      if (first_value("SELECT count(*)::text FROM pg_attribute WHERE attrelid = to_regclass($1) "
                      "AND attname IN ('replayed_at', 'properties', 'pipeline', 'body_sha256') "
                      "AND NOT attisdropped",
                      rejects, "rejects table's columns") != "4")
        exec("ALTER TABLE " + rejects +
             " ADD COLUMN IF NOT EXISTS replayed_at timestamptz,"
             " ADD COLUMN IF NOT EXISTS properties text, ADD COLUMN IF NOT EXISTS pipeline text,"
             " ADD COLUMN IF NOT EXISTS body_sha256 text");
      // One row per message, reason, pipeline and body (rows of earlier releases have no
      // pipeline, NULL: distinct from any other, so they never stop the index being
      // made; nor do messages without an id).
      // Asked first: CREATE INDEX IF NOT EXISTS waits for the table's writers even when
      // the index is there.
      const std::string index = sql_identifier("uniq_" + options_.rejects_table + "_message");
      if (first_value("SELECT (to_regclass($1) IS NOT NULL)::text", index,
                      "rejects table's index") != "true")
        exec("CREATE UNIQUE INDEX IF NOT EXISTS " + index + " ON " + rejects +
             " (pipeline, message_id, reason, body_sha256)");
    } catch (...) {
      if (conn_ && PQstatus(conn_) == CONNECTION_OK) {
        try {
          exec("SELECT pg_advisory_unlock(5391)");
        } catch (const SinkError&) {
        }
      }
      throw;
    }
    exec("SELECT pg_advisory_unlock(5391)");
    read_column_types();
    statements_.clear();
    for (const auto& table : tables()) statements_.push_back(insert_sql(table));
    if (use_prepared_)
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
      send(st);
      std::vector<std::string> rows;
      collect_results(rows, "column types of " + tables()[route]);
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
    if (!PQsendPrepare(conn_, name.c_str(), sql.c_str(), 0, nullptr)) fail("prepare");
    flush(Clock::now() + options_.query_timeout);
    const auto deadline = Clock::now() + options_.query_timeout;
    std::string error, state;
    while (PGresult* res = next_result(deadline)) {
      if (PQresultStatus(res) != PGRES_COMMAND_OK && error.empty()) {
        error = PQresultErrorMessage(res);
        const char* code = PQresultErrorField(res, PG_DIAG_SQLSTATE);
        state = code ? code : "";
      }
      PQclear(res);
    }
    if (PQstatus(conn_) != CONNECTION_OK) fail("prepare");
    if (error.empty() || state == "42P05") return;  // 42P05: duplicate_prepared_statement
    throw_error("prepare of the insert into " + tables()[route], error, classify_sqlstate(state));
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

  struct Statement {
    std::string sql;
    std::string prepared;              // the name of the same statement prepared, if it is
    std::vector<std::string> storage;  // owns what `values` points to
    std::vector<const char*> values;
    std::vector<int> lengths;  // of binary values (formats 1); text values end at their NUL
    std::vector<int> formats;
  };

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
    if (use_prepared_) st.prepared = prepared_name(st.sql);
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

  static void collect(PGresult* res, std::vector<std::string>& inserted) {
    for (int row = 0; row < PQntuples(res); ++row) inserted.emplace_back(PQgetvalue(res, row, 0));
  }

  std::vector<std::string> run_single(const Statement& st, std::size_t rows) {
    send(st);
    std::vector<std::string> inserted;
    collect_results(inserted, "insert of " + std::to_string(rows) + " records");
    return inserted;
  }

  std::vector<std::string> run_pipelined(const std::vector<Statement>& statements,
                                         std::size_t rows) {
    if (!PQenterPipelineMode(conn_)) fail("enter pipeline mode");
    // Statements up to a sync share an implicit transaction: all are written or none (a
    // failed one rolls back the ones before it and skips the rest).
    for (const auto& st : statements)
      if (!dispatch(st)) fail("pipelined insert");
    if (!PQpipelineSync(conn_)) fail("pipeline sync");
    const auto deadline = Clock::now() + options_.query_timeout;
    flush(deadline);
    std::vector<std::string> inserted;
    std::string error;
    SinkFailure kind = SinkFailure::transient;
    // Results: one per query (each followed by a null), then the sync.
    for (;;) {
      PGresult* res = next_result(deadline);
      if (!res) continue;  // end of one query's results
      const auto status = PQresultStatus(res);
      if (status == PGRES_PIPELINE_SYNC) {
        PQclear(res);
        break;
      }
      if (status == PGRES_TUPLES_OK) {
        collect(res, inserted);
      } else if (status != PGRES_COMMAND_OK && error.empty() && status != PGRES_PIPELINE_ABORTED) {
        error = PQresultErrorMessage(res);
        kind = classify(res);
      }
      PQclear(res);
      if (PQstatus(conn_) != CONNECTION_OK) fail("pipelined insert");
    }
    PQexitPipelineMode(conn_);
    if (!error.empty())
      throw_error("pipelined insert of " + std::to_string(rows) + " records", error, kind);
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
      send(st);
      std::vector<std::string> none;
      collect_results(none, "insert reject");
    }
  }

  std::vector<StoredReject> read_rejects(const RejectQuery& query) override {
    ensure_open();
    // Each row as one JSON array: the first column is all collect_results() reads.
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
    send(st);
    std::vector<std::string> lines;
    collect_results(lines, "read rejects");
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
    send(st);
    std::vector<std::string> none;
    collect_results(none, "mark replayed");
  }

  std::uint64_t count_records() override {
    ensure_open();
    Statement st;
    for (const auto& table : tables())
      st.sql += (st.sql.empty() ? "SELECT (" : " + ") + std::string("(SELECT count(*) FROM ") +
                sql_identifier(table) + ")";
    st.sql += ")::text";
    send(st);
    std::vector<std::string> counts;
    collect_results(counts, "count");
    return counts.empty() ? 0 : std::stoull(*counts.begin());
  }

  std::optional<std::string> load_position(const std::string& key) override {
    ensure_positions();
    return first_value("SELECT position FROM sluice_positions WHERE key = $1", key,
                       "read a position");
  }

  void save_position(const std::string& key, const std::string& value) override {
    ensure_positions();
    send(position_statement(key, value));
    std::vector<std::string> none;
    collect_results(none, "save a position");
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

  void interrupt() override { interrupted_ = true; }

 private:
  void ensure_open() {
    if (!conn_ || PQstatus(conn_) != CONNECTION_OK) open();
  }
  void ensure_positions() {
    ensure_open();
    if (positions_ready_) return;
    exec(
        "CREATE TABLE IF NOT EXISTS sluice_positions (key text PRIMARY KEY, position text NOT "
        "NULL, saved_at timestamptz NOT NULL DEFAULT now())");
    positions_ready_ = true;
  }
  const std::vector<std::string>& tables() const { return tables_; }
  void close() {
    if (conn_) PQfinish(conn_);
    conn_ = nullptr;
    positions_ready_ = false;
  }
  SinkFailure classify(const PGresult* res) {
    if (!conn_ || PQstatus(conn_) != CONNECTION_OK) return SinkFailure::unavailable;
    const char* state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : nullptr;
    // invalid_sql_statement_name: a pooler in transaction mode (PgBouncer before 1.21)
    // moved us to a server connection that never saw our prepared statements. The batch
    // is retried with unnamed statements, which work behind any pooler.
    if (state && std::string_view(state) == "26000" && use_prepared_) {
      use_prepared_ = false;
      spdlog::warn(
          "event=postgres_prepared_statements_lost sink={} (a connection pooler in "
          "transaction mode?): writing with unnamed statements from now on",
          describe());
    }
    return classify_sqlstate(state ? state : "");
  }
  [[noreturn]] void throw_error(const std::string& what, std::string error, SinkFailure kind) {
    while (!error.empty() && (error.back() == '\n' || error.back() == ' ')) error.pop_back();
    std::replace(error.begin(), error.end(), '\n', ' ');  // one log line
    if (kind == SinkFailure::unavailable) close();        // the next call connects again
    // libpq may quote the connection string it could not read, password included.
    throw SinkError("PostgreSQL " + what + ": " + common::redact_secret(error, options_.dsn), kind);
  }
  // A failure of the connection itself (no result to classify).
  [[noreturn]] void fail(const std::string& what) {
    const std::string error = conn_ ? PQerrorMessage(conn_) : "no connection";
    throw_error(what, error, SinkFailure::unavailable);
  }

  // Waits until the socket is ready for `events`, in short slices so that interrupt()
  // is noticed; past the deadline the connection is dropped (its state is unknown).
  void wait_socket(short events, Clock::time_point deadline, const std::string& what) {
    wait_socket(events, deadline, what, "sink.postgres.query_timeout", options_.query_timeout);
  }
  // `limit` and `value`: the option that set the deadline, named in the error.
  void wait_socket(short events, Clock::time_point deadline, const std::string& what,
                   const char* limit, std::chrono::milliseconds value) {
    for (;;) {
      if (interrupted_) {
        close();
        throw SinkError("PostgreSQL " + what + ": interrupted at the shutdown deadline",
                        SinkFailure::transient);
      }
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) {
        close();
        throw SinkError("PostgreSQL " + what + ": no answer within " + limit + " (" +
                            std::to_string(value.count()) + " ms); connection dropped",
                        SinkFailure::unavailable);
      }
      pollfd fd{PQsocket(conn_), events, 0};
      const int n = ::poll(&fd, 1, static_cast<int>(std::min<std::int64_t>(left.count(), 100)));
      if (n > 0) return;
      if (n < 0 && errno != EINTR) fail(what);
    }
  }
  void flush(Clock::time_point deadline) {
    for (;;) {
      const int pending = PQflush(conn_);
      if (pending == 0) return;
      if (pending < 0) fail("send");
      wait_socket(POLLOUT | POLLIN, deadline, "send");
      if (!PQconsumeInput(conn_)) fail("receive");
    }
  }
  PGresult* next_result(Clock::time_point deadline) {
    while (PQisBusy(conn_)) {
      wait_socket(POLLIN, deadline, "query");
      if (!PQconsumeInput(conn_)) fail("receive");
    }
    return PQgetResult(conn_);
  }
  // Hands a statement to libpq (not yet flushed): the prepared one where there is one.
  bool dispatch(const Statement& st) {
    const int n = static_cast<int>(st.values.size());
    const int* lengths = st.lengths.empty() ? nullptr : st.lengths.data();
    const int* formats = st.formats.empty() ? nullptr : st.formats.data();
    if (!st.prepared.empty())
      return PQsendQueryPrepared(conn_, st.prepared.c_str(), n, st.values.data(), lengths, formats,
                                 0);
    return PQsendQueryParams(conn_, st.sql.c_str(), n, nullptr, st.values.data(), lengths, formats,
                             0);
  }
  // The first column of the first row of a query with one text parameter; none when
  // it returns no row.
  std::optional<std::string> first_value(const char* sql, const std::string& parameter,
                                         const std::string& what) {
    Statement st;
    st.sql = sql;
    st.values = {parameter.c_str()};
    send(st);
    std::vector<std::string> rows;
    collect_results(rows, what);
    if (rows.empty()) return std::nullopt;
    return rows.front();
  }
  void send(const Statement& st) {
    if (!dispatch(st)) fail("send");
    flush(Clock::now() + options_.query_timeout);
  }
  // Reads every result of the statement sent last; rows' first column into `rows`.
  void collect_results(std::vector<std::string>& rows, const std::string& what) {
    const auto deadline = Clock::now() + options_.query_timeout;
    std::string error;
    SinkFailure kind = SinkFailure::transient;
    while (PGresult* res = next_result(deadline)) {
      const auto status = PQresultStatus(res);
      if (status == PGRES_TUPLES_OK) {
        collect(res, rows);
      } else if (status != PGRES_COMMAND_OK && error.empty()) {
        error = PQresultErrorMessage(res);
        kind = classify(res);
      }
      PQclear(res);
    }
    if (PQstatus(conn_) != CONNECTION_OK) fail(what);
    if (!error.empty()) throw_error(what, error, kind);
  }
  void exec(const std::string& sql) {
    Statement st;
    st.sql = sql;
    send(st);
    std::vector<std::string> rows;
    collect_results(rows, "'" + sql.substr(0, 50) + "'");
  }

  PostgresOptions options_;
  std::vector<std::string> tables_;  // sink.table, then the routed tables: by Record::route
  PGconn* conn_ = nullptr;
  std::atomic<bool> interrupted_{false};
  bool positions_ready_ = false;         // sluice_positions made on this connection
  bool use_prepared_ = true;             // until a pooler loses them (classify)
  std::vector<std::string> statements_;  // the insert of each table, by Record::route
  std::vector<std::map<std::string, std::string>> column_types_;  // by route: name -> type
};

}  // namespace

std::unique_ptr<Sink> make_postgres_sink(PostgresOptions options) {
  return std::make_unique<PostgresSink>(std::move(options));
}

}  // namespace sluice::sinks
