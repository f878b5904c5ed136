#pragma once
// One libpq connection with every call bounded: libpq runs non-blocking and each wait
// on its socket has a deadline (sink.postgres.query_timeout, connect_timeout), so a
// frozen server or network never holds a writer; interrupt() makes a waiting call
// return within a poll slice. Errors are SinkErrors sorted by SQLSTATE, with no
// password of the connection string in them.
#include <libpq-fe.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sluice/driver/sink.hpp"

namespace sluice::sinks::postgres {

using Clock = std::chrono::steady_clock;

struct Statement {
  std::string sql;
  std::string prepared;              // the name of the same statement prepared, if it is
  std::vector<std::string> storage;  // owns what `values` points to
  std::vector<const char*> values;
  std::vector<int> lengths;  // of binary values (formats 1); text values end at their NUL
  std::vector<int> formats;
};

class Session {
 public:
  // `name`: the sink as logs name it.
  Session(std::string dsn, std::chrono::milliseconds connect_timeout,
          std::chrono::milliseconds query_timeout, std::string name);
  ~Session() { close(); }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Connects (closing any connection first) and sets the server's statement_timeout.
  void connect();
  bool connected() const { return conn_ && PQstatus(conn_) == CONNECTION_OK; }
  PGconn* raw() const { return conn_; }
  // Counts connections made: what was set up on a connection (a table made, a
  // statement prepared) is known to be there while it is unchanged.
  std::uint64_t generation() const { return generation_; }
  void interrupt() { interrupted_ = true; }
  // Prepared statements may be used (until a pooler loses them: classify).
  bool use_prepared() const { return use_prepared_; }

  void close();
  SinkFailure classify(const PGresult* res);
  [[noreturn]] void throw_error(const std::string& what, std::string error, SinkFailure kind);
  // A failure of the connection itself (no result to classify).
  [[noreturn]] void fail(const std::string& what);

  // Waits until the socket is ready for `events`, in short slices so that interrupt()
  // is noticed; past the deadline the connection is dropped (its state is unknown).
  void wait_socket(short events, Clock::time_point deadline, const std::string& what);
  // `limit` and `value`: the option that set the deadline, named in the error.
  void wait_socket(short events, Clock::time_point deadline, const std::string& what,
                   const char* limit, std::chrono::milliseconds value);
  void flush(Clock::time_point deadline);
  PGresult* next_result(Clock::time_point deadline);
  // Hands a statement to libpq (not yet flushed): the prepared one where there is one.
  bool dispatch(const Statement& st);
  // The first column of the first row of a query with one text parameter; none when
  // it returns no row.
  std::optional<std::string> first_value(const char* sql, const std::string& parameter,
                                         const std::string& what);
  void send(const Statement& st);
  // Reads every result of the statement sent last; rows' first column into `rows`.
  void collect_results(std::vector<std::string>& rows, const std::string& what);
  void exec(const std::string& sql);

  // Rows' first column of a result, appended.
  static void collect(PGresult* res, std::vector<std::string>& rows);

 private:
  std::string dsn_;
  std::chrono::milliseconds connect_timeout_;
  std::chrono::milliseconds query_timeout_;
  std::string name_;
  PGconn* conn_ = nullptr;
  std::uint64_t generation_ = 0;
  std::atomic<bool> interrupted_{false};
  bool use_prepared_ = true;
};

}  // namespace sluice::sinks::postgres
