#pragma once
// PostgreSQL: its options (typed columns beside the JSONB document) and its sink.

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "sluice/driver/sink.hpp"

namespace sluice::sinks {

// A typed column for PostgreSQL, copied from a normalized field (by its dotted name;
// the column's name has underscores for the dots: customer.id -> customer_id).
struct Column {
  std::string field;
  pipeline::FieldType type = pipeline::FieldType::string;
  bool epoch_ms = false;  // a timestamp stored as epoch milliseconds: converted by the server
};

struct PostgresOptions {
  std::string dsn;  // libpq connection string
  std::string table = "records";
  std::string rejects_table = "rejects";
  std::vector<Column> columns;
  std::chrono::milliseconds connect_timeout{5000};
  // Every call waits at most this long for the server (a frozen server, a lost
  // network): then the connection is dropped and the batch retried on a new one. The
  // server's own statement_timeout is set to the same value.
  std::chrono::milliseconds query_timeout{30000};
  std::vector<std::string> routes;  // tables for Record::route 1, 2, ... (route.tables)
};

std::unique_ptr<Sink> make_postgres_sink(PostgresOptions options);

}  // namespace sluice::sinks
