#include "app/run_summary.hpp"

#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <future>
#include <iostream>
#include <thread>

#include "common/thread_name.hpp"
#include "observe/metrics.hpp"
#include "sluice/driver/source_driver.hpp"

namespace sluice::app {

void fill_from_metrics(RunSummary& summary, const PipelineMetrics& metrics,
                       const driver::SourceDriver& source) {
  summary.received = metrics.received();
  summary.written = metrics.written();
  summary.duplicates = metrics.duplicates();
  summary.filtered = metrics.filtered();
  summary.failed = metrics.failed_writes();
  summary.rejected_malformed = metrics.rejected("malformed");
  summary.rejected_validation = metrics.rejected("validation");
  summary.rejected_schema_drift = metrics.rejected("schema_drift");
  summary.rejected_sink_refused = metrics.rejected("sink_refused");
  for (const auto& [reason, when] : source.reject_reasons())
    if (const auto n = metrics.rejected(reason); n > 0) summary.rejected_by_source[reason] = n;
  summary.source_figures = metrics.source_summary();
  summary.active_seconds = metrics.active_seconds();
  summary.poll_latency_ms = metrics.mean_poll_latency_ms();
  summary.sink_latency_ms = metrics.mean_sink_latency_ms();
  summary.sink_batch = metrics.mean_sink_batch();
}

std::optional<std::uint64_t> count_records_within(sinks::BatchWriter::SinkFactory factory,
                                                  std::chrono::steady_clock::duration budget,
                                                  bool& abandoned) {
  auto counted = std::make_shared<std::promise<std::uint64_t>>();
  auto future = counted->get_future();
  std::thread([factory = std::move(factory), counted] {
    common::name_this_thread("sluice-count");
    try {
      std::uint64_t records = 0;
      {  // closed before the answer: whoever reads the database next finds it free
        auto sink = factory();
        records = sink->count_records();
      }
      counted->set_value(records);
    } catch (...) {
      counted->set_exception(std::current_exception());
    }
  }).detach();
  if (future.wait_for(budget) != std::future_status::ready) {
    spdlog::warn("event=count_skipped reason=\"no answer in time\"");
    abandoned = true;
    return std::nullopt;
  }
  try {
    return future.get();
  } catch (const std::exception& e) {
    spdlog::warn("event=count_failed error=\"{}\"", e.what());
    return std::nullopt;
  }
}

void print_summary(const RunSummary& s) {
  std::uint64_t rejected = s.rejected_malformed + s.rejected_validation + s.rejected_schema_drift +
                           s.rejected_sink_refused;
  std::string by_source;  // reasons of the source's own (a payload missing, a line too long)
  for (const auto& [reason, n] : s.rejected_by_source) {
    rejected += n;
    by_source += ", " + reason + " " + std::to_string(n);
  }
  std::cout << "\n== sluice run summary" << (s.name.empty() ? "" : ": pipeline " + s.name)
            << " ==\n";
  if (!s.never_started.empty()) std::cout << "  never started       " << s.never_started << "\n";
  std::cout << "  received            " << s.received << "\n"
            << "  written (new)       " << s.written << "\n"
            << "  duplicates          " << s.duplicates
            << "  (same business record, already stored)\n";
  if (s.filtered > 0)
    std::cout << "  filtered            " << s.filtered
              << "  (matched no filter pattern: acked, not written)\n";
  std::cout << "  rejected            " << rejected << "  (malformed " << s.rejected_malformed
            << ", validation " << s.rejected_validation << ", schema drift "
            << s.rejected_schema_drift << ", refused by the sink " << s.rejected_sink_refused
            << by_source << ")\n";
  for (const auto& [label, value] : s.source_figures) {
    std::string padded = "  " + label;
    padded.resize(std::max<std::size_t>(padded.size() + 1, 22), ' ');
    std::cout << padded << value << "\n";
  }
  std::cout << "  failed writes       " << s.failed << "  (" << s.unresolved
            << " never written since)\n"
            << "  records in sink     " << s.records_in_sink << "  (" << s.sink << ")\n"
            << "  receive latency     " << s.poll_latency_ms << " ms mean\n"
            << "  sink writes         " << s.sink_batch << " records per batch, "
            << s.sink_latency_ms << " ms per batch (means)\n"
            << "  elapsed             " << s.seconds << " s (" << s.active_seconds
            << " s with messages), " << (s.active_seconds > 0 ? s.received / s.active_seconds : 0)
            << " messages/s";
  if (s.cpu_seconds > 0)
    std::cout << ", " << (s.received ? s.cpu_seconds / static_cast<double>(s.received) * 1e6 : 0)
              << " us CPU/message";
  std::cout << "\n";
}

double process_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

void print_summaries(std::vector<RunSummary>& summaries, double cpu_seconds, bool quiet) {
  std::uint64_t received = 0;
  for (auto& s : summaries) {
    received += s.received;
    if (summaries.size() == 1) {
      s.name.clear();
      s.cpu_seconds = cpu_seconds;
    }  // several: the process's CPU is not one pipeline's (said once, below)
  }
  if (quiet) return;
  for (const auto& s : summaries) print_summary(s);
  if (summaries.size() > 1)
    std::cout << "\n  process CPU         " << cpu_seconds << " s for " << received
              << " messages in " << summaries.size() << " pipelines ("
              << (received ? cpu_seconds / static_cast<double>(received) * 1e6 : 0)
              << " us CPU/message)\n";
}

}  // namespace sluice::app
