#pragma once
// The `sluice run` configuration: one YAML file, validated on load. Every option is
// defined once, in the option table in config.cpp (name, type, default, doc,
// validation, environment override); the loader, `sluice config docs` and
// docs/configuration.md all come from that table.

#include <chrono>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipeline/transform.hpp"
#include "sinks/writer.hpp"
#include "sluice/container.hpp"
#include "sluice/driver/sink_driver.hpp"
#include "sluice/driver/source_driver.hpp"
#include "sluice/scale/in_flight.hpp"
#include "sluice/tracing.hpp"

namespace sluice::app {

using config::ConfigError;  // names the key, the value and what was expected

struct PipelineConfig {
  std::string name = "default";  // in /pipelines/NAME, sluice ctl and logs
  // source: the chosen driver (source.type) with its own section (source.<type>.*),
  // and the container core that drains it (the other source.* keys)
  std::string source_type;  // source.type
  const driver::SourceDriver* source_driver = nullptr;
  std::shared_ptr<const driver::SourceSettings> source;  // the driver's settings
  ContainerOptions container;
  bool wait_for_queue = false;           // a missing queue at start: wait for it instead of exit 2
  bool max_body_bytes_set = false;       // decode.max_body_bytes given (not its default)
  bool max_record_failures_set = false;  // sink.max_record_failures given (not its default)
  bool concurrency_set = false;          // source.concurrency given (not its default)
  bool receive_scaler_set = false;       // a trigger of the MIN-MAX receive scaler given
  // stages
  pipeline::TransformSpec transform;
  // sink: the chosen driver (sink.type) with its own section (sink.<type>.*), and the
  // writers that feed it (the other sink.* keys)
  std::string sink_type;  // sink.type
  const sinks::SinkDriver* sink_driver = nullptr;
  std::shared_ptr<const sinks::SinkSettings> sink;  // the driver's settings
  std::string sink_table;                           // sink.table
  std::string sink_rejects_table;                   // sink.rejects_table
  sinks::WriterOptions writer;
  // operations
  scale::SignalOptions autoscale;  // capacity below
  int autoscale_capacity = 0;      // 0: container.max_in_flight
  long autoscale_running = 1;
  std::string metrics_listen = "127.0.0.1:9464";
  bool admin_enabled = false;     // pause/resume/status on the metrics server
  std::string admin_token;        // SLUICE_ADMIN_TOKEN: never from the file, never printed
  tracing::TracerOptions tracer;  // tracing.*: the process's
  std::string log_level = "info";
  std::vector<std::string> log_fields;  // business fields carried in log lines
  // Said once at start: keys of earlier releases read under their new names.
  std::vector<std::string> warnings;

  // The chosen source's settings as its driver's own settings type.
  template <class Settings>
  const Settings& source_as() const {
    return dynamic_cast<const Settings&>(*source);
  }
  // The chosen sink's, likewise (sinks/<database>/driver.hpp).
  template <class Settings>
  const Settings& sink_as() const {
    return dynamic_cast<const Settings&>(*sink);
  }
};

// "250ms", "20s", "5m", "1h"; nullopt for anything else (or a value that would overflow).
using config::parse_duration;
// A command-line duration: throws std::invalid_argument "FLAG: got 'V', expected ..."
// outside [min, max].
std::chrono::milliseconds duration_flag(const std::string& flag, const std::string& value,
                                        std::chrono::milliseconds min,
                                        std::chrono::milliseconds max);

// Loads and validates; environment overrides applied (see the table).
PipelineConfig load_config(const std::string& path);
PipelineConfig parse_config(const std::string& yaml_text, const std::string& origin = "<config>");
// A file with `pipelines:` (each pipeline's name -> its keys) runs several pipelines in
// one process. The other top-level keys are every pipeline's defaults (a pipeline's own
// mappings merge over them, key by key); metrics.*, admin.* and logging.level are the
// process's and refused inside a pipeline; no two pipelines write one SQLite file; a
// variable of a pipeline's key (SLUICE_QUEUE_URL, ...) is refused. A file without
// `pipelines:` is one pipeline, as parse_config reads it.
std::vector<PipelineConfig> parse_pipelines(const std::string& yaml_text,
                                            const std::string& origin = "<config>");
std::vector<PipelineConfig> load_pipelines(const std::string& path);

// docs/configuration.md, generated from the option table.
std::string configuration_markdown();

// The effective configuration as YAML, secrets redacted.
std::string describe(const PipelineConfig& config);

}  // namespace sluice::app
