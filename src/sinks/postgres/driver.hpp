#pragma once
// The PostgreSQL sink driver (sink.type: postgres): its settings, as a pipeline's configuration
// holds them (PipelineConfig::sink_as), and the driver.

#include "sinks/postgres/postgres_sink.hpp"
#include "sluice/driver/sink_driver.hpp"

namespace sluice::sinks {

struct PostgresSettings : SinkSettings {
  PostgresOptions options;  // sink.table, sink.rejects_table and the routes filled in by finalize
};

const SinkDriver& postgres_sink_driver();

}  // namespace sluice::sinks
