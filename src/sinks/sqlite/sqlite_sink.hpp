#pragma once
// SQLite, the embedded default: its options and its sink.

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "sluice/driver/sink.hpp"

namespace sluice::sinks {

struct SqliteOptions {
  std::string path = "sluice.db";
  std::string table = "records";
  std::string rejects_table = "rejects";
  std::string synchronous = "FULL";  // FULL: a commit survives power loss; NORMAL: a crash
  std::chrono::milliseconds busy_timeout{10000};
  std::vector<std::string> routes;  // tables for Record::route 1, 2, ... (route.tables)
};

std::unique_ptr<Sink> make_sqlite_sink(SqliteOptions options);

}  // namespace sluice::sinks
