#pragma once
#include <chrono>

#include "app/config.hpp"
#include "app/run_summary.hpp"

namespace sluice::app {

struct RunOptions {
  bool until_drained = false;  // stop once the queue is empty and everything is settled
  std::chrono::milliseconds drained_for{2000};  // ... for this long
  bool quiet = false;                           // no summary on stdout
};

// Runs the pipeline until SIGTERM/SIGINT (or drained), then stops gracefully.
// Returns the process exit code; fills `summary`.
int run_pipeline(const PipelineConfig& config, const RunOptions& options, RunSummary& summary);

}  // namespace sluice::app
