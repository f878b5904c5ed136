#pragma once
// The SQLite sink driver (sink.type: sqlite): its settings, as a pipeline's configuration
// holds them (PipelineConfig::sink_as), and the driver.

#include "sluice/driver/sink_driver.hpp"
#include "sinks/sqlite/sqlite_sink.hpp"

namespace sluice::sinks {

struct SqliteSettings : SinkSettings {
  SqliteOptions options;  // sink.table, sink.rejects_table and the routes filled in by finalize
};

const SinkDriver& sqlite_sink_driver();

}  // namespace sluice::sinks
