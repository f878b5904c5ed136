#pragma once
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "app/config.hpp"

namespace sluice::app {

struct RunOptions {
  bool until_drained = false;  // stop once the queue is empty and everything is settled
  std::chrono::milliseconds drained_for{2000};  // ... for this long
  bool quiet = false;                           // no summary on stdout
};

struct RunSummary {
  std::uint64_t received = 0, written = 0, duplicates = 0, failed = 0;
  std::uint64_t rejected_malformed = 0, rejected_validation = 0, rejected_schema_drift = 0,
                rejected_sink_refused = 0;
  // Messages the source could not make usable, by reason (payload_missing, ...).
  std::map<std::string, std::uint64_t> rejected_by_source;
  std::uint64_t records_in_sink = 0;
  // The source's figures with a summary line ("S3 payloads fetched", ...), not 0.
  std::vector<std::pair<std::string, std::uint64_t>> source_figures;
  std::uint64_t unresolved = 0;  // messages whose last write failed (not written since)
  double seconds = 0;            // the whole run
  double active_seconds = 0;     // first message received to last settled
  double cpu_seconds = 0;
  double poll_latency_ms = 0, sink_latency_ms = 0, sink_batch = 0;  // means
  std::string sink;
  // The closing count got no answer in time: its thread is still in the database's
  // client library, and the process must exit without running static destructors
  // under it (main() does).
  bool count_abandoned = false;
};

// Runs the pipeline until SIGTERM/SIGINT (or drained), then stops gracefully.
// Returns the process exit code; fills `summary`.
int run_pipeline(const PipelineConfig& config, const RunOptions& options, RunSummary& summary);

void print_summary(const RunSummary& summary);

}  // namespace sluice::app
