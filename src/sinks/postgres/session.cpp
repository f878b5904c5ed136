// One libpq connection with bounded calls (sinks/postgres/session.hpp).
#include "sinks/postgres/session.hpp"

#include <poll.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <string_view>

#include "common/redact.hpp"
#include "sinks/postgres/wire.hpp"

namespace sluice::sinks::postgres {

Session::Session(std::string dsn, std::chrono::milliseconds connect_timeout,
                 std::chrono::milliseconds query_timeout, std::string name)
    : dsn_(std::move(dsn)),
      connect_timeout_(connect_timeout),
      query_timeout_(query_timeout),
      name_(std::move(name)) {}

void Session::connect() {
  close();
  // Our defaults first, the user's connection string (expanded from "dbname") after:
  // what the user sets wins. Keepalives and tcp_user_timeout notice a dead peer.
  const std::string timeout_ms = std::to_string(query_timeout_.count());
  const char* keys[] = {"keepalives",
                        "keepalives_idle",
                        "keepalives_interval",
                        "keepalives_count",
                        "tcp_user_timeout",
                        "fallback_application_name",
                        "dbname",
                        nullptr};
  const char* values[] = {"1", "10", "5", "3", timeout_ms.c_str(), "sluice", dsn_.c_str(), nullptr};
  conn_ = PQconnectStartParams(keys, values, /*expand_dbname=*/1);
  if (!conn_ || PQstatus(conn_) == CONNECTION_BAD) fail("connect");
  const auto deadline = Clock::now() + connect_timeout_;
  for (auto status = PGRES_POLLING_WRITING; status != PGRES_POLLING_OK;) {
    if (status == PGRES_POLLING_FAILED) fail("connect");
    wait_socket(status == PGRES_POLLING_READING ? POLLIN : POLLOUT, deadline, "connect",
                "sink.postgres.connect_timeout",
                std::chrono::duration_cast<std::chrono::milliseconds>(connect_timeout_));
    status = PQconnectPoll(conn_);
  }
  PQsetnonblocking(conn_, 1);
  // "relation already exists, skipping" and friends: not worth a line on stderr.
  PQsetNoticeProcessor(
      conn_, [](void*, const char*) {}, nullptr);
  // The server stops a statement when we stop waiting for it. A SET, not the
  // "options" startup parameter, which connection poolers such as PgBouncer refuse.
  exec("SET statement_timeout = " + timeout_ms);
  ++generation_;
}

void Session::collect(PGresult* res, std::vector<std::string>& rows) {
  for (int row = 0; row < PQntuples(res); ++row) rows.emplace_back(PQgetvalue(res, row, 0));
}

void Session::close() {
  if (conn_) PQfinish(conn_);
  conn_ = nullptr;
}

SinkFailure Session::classify(const PGresult* res) {
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
        name_);
  }
  return classify_sqlstate(state ? state : "");
}

void Session::throw_error(const std::string& what, std::string error, SinkFailure kind) {
  while (!error.empty() && (error.back() == '\n' || error.back() == ' ')) error.pop_back();
  std::replace(error.begin(), error.end(), '\n', ' ');  // one log line
  if (kind == SinkFailure::unavailable) close();        // the next call connects again
  // libpq may quote the connection string it could not read, password included.
  throw SinkError("PostgreSQL " + what + ": " + common::redact_secret(error, dsn_), kind);
}

void Session::fail(const std::string& what) {
  const std::string error = conn_ ? PQerrorMessage(conn_) : "no connection";
  throw_error(what, error, SinkFailure::unavailable);
}

void Session::wait_socket(short events, Clock::time_point deadline, const std::string& what) {
  wait_socket(events, deadline, what, "sink.postgres.query_timeout", query_timeout_);
}

void Session::wait_socket(short events, Clock::time_point deadline, const std::string& what,
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

void Session::flush(Clock::time_point deadline) {
  for (;;) {
    const int pending = PQflush(conn_);
    if (pending == 0) return;
    if (pending < 0) fail("send");
    wait_socket(POLLOUT | POLLIN, deadline, "send");
    if (!PQconsumeInput(conn_)) fail("receive");
  }
}

PGresult* Session::next_result(Clock::time_point deadline) {
  while (PQisBusy(conn_)) {
    wait_socket(POLLIN, deadline, "query");
    if (!PQconsumeInput(conn_)) fail("receive");
  }
  return PQgetResult(conn_);
}

bool Session::dispatch(const Statement& st) {
  const int n = static_cast<int>(st.values.size());
  const int* lengths = st.lengths.empty() ? nullptr : st.lengths.data();
  const int* formats = st.formats.empty() ? nullptr : st.formats.data();
  if (!st.prepared.empty())
    return PQsendQueryPrepared(conn_, st.prepared.c_str(), n, st.values.data(), lengths, formats,
                               0);
  return PQsendQueryParams(conn_, st.sql.c_str(), n, nullptr, st.values.data(), lengths, formats,
                           0);
}

std::optional<std::string> Session::first_value(const char* sql, const std::string& parameter,
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

void Session::send(const Statement& st) {
  if (!dispatch(st)) fail("send");
  flush(Clock::now() + query_timeout_);
}

void Session::collect_results(std::vector<std::string>& rows, const std::string& what) {
  const auto deadline = Clock::now() + query_timeout_;
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

void Session::exec(const std::string& sql) {
  Statement st;
  st.sql = sql;
  send(st);
  std::vector<std::string> rows;
  collect_results(rows, "'" + sql.substr(0, 50) + "'");
}

}  // namespace sluice::sinks::postgres
