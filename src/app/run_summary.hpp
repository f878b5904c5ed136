#pragma once
// What `sluice run` says when it ends: the summary's figures, gathered from the
// metrics, and the records in the sink, counted within a budget.
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sinks/writer.hpp"

namespace sluice::driver {
class SourceDriver;
}

namespace sluice::app {

class PipelineMetrics;

struct RunSummary {
  std::string name;  // the pipeline's, when the process runs several
  std::uint64_t received = 0, written = 0, duplicates = 0, failed = 0;
  std::uint64_t filtered = 0;  // matched no filter pattern: acked, not written
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
  // Why a pipeline of several never started (its sink never opened), or empty.
  std::string never_started;
  // The closing count got no answer in time: its thread is still in the database's
  // client library, and the process must exit without running static destructors
  // under it (main() does).
  bool count_abandoned = false;
};

// The figures the metrics hold: received, written, duplicates, failed, rejected by
// reason (the source's own reasons as its driver declares them), the source's
// summary lines and the means.
void fill_from_metrics(RunSummary& summary, const PipelineMetrics& metrics,
                       const driver::SourceDriver& source);

// The records in the sink, counted on a thread of their own and waited for at most
// `budget`: a server that stopped answering must not hold the exit. Nothing when the
// count failed (logged) or did not answer in time (then `abandoned` is set).
std::optional<std::uint64_t> count_records_within(sinks::BatchWriter::SinkFactory factory,
                                                  std::chrono::steady_clock::duration budget,
                                                  bool& abandoned);

void print_summary(const RunSummary& summary);

// The process's CPU time so far (user and system), in seconds.
double process_cpu_seconds();
// Every pipeline's summary, and the process's CPU: one pipeline's own (its summary
// unnamed), or said once for several. Nothing printed when `quiet`.
void print_summaries(std::vector<RunSummary>& summaries, double cpu_seconds, bool quiet);

}  // namespace sluice::app
