#pragma once
#include <chrono>
#include <vector>

#include "app/run_summary.hpp"
#include "config/config.hpp"

namespace sluice::app {

struct RunOptions {
  bool until_drained = false;  // stop once the queue is empty and everything is settled
  std::chrono::milliseconds drained_for{2000};  // ... for this long
  bool quiet = false;                           // no summary on stdout
};

// A connection to the pipeline's sink (not yet opened), one per call.
sinks::BatchWriter::SinkFactory sink_factory(const PipelineConfig& config);

// Runs the pipeline until SIGTERM/SIGINT (or drained), then stops gracefully.
// Returns the process exit code; fills `summary`.
int run_pipeline(const PipelineConfig& config, const RunOptions& options, RunSummary& summary);
// Several pipelines in one process (`pipelines:`), each with its own container,
// writers and permits, on one metrics server (a `pipeline` label on every series), one
// signal and one shutdown deadline; --until-drained waits for all of them. The metrics
// server and admin settings are the first pipeline's (the loader gives all the same).
int run_pipelines(const std::vector<PipelineConfig>& configs, const RunOptions& options,
                  std::vector<RunSummary>& summaries);

}  // namespace sluice::app
