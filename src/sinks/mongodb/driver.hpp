#pragma once
// The MongoDB sink driver (sink.type: mongodb): its settings, as a pipeline's configuration
// holds them (PipelineConfig::sink_as), and the driver.

#include "sinks/mongodb/mongo_sink.hpp"
#include "sluice/driver/sink_driver.hpp"

namespace sluice::sinks {

struct MongoSettings : SinkSettings {
  MongoOptions options;      // sink.table, sink.rejects_table and the routes filled in by finalize
  bool typed_values = true;  // sink.mongodb.typed_values: finalize fills options.typed_fields
};

const SinkDriver& mongodb_sink_driver();

}  // namespace sluice::sinks
