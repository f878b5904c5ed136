#pragma once
// Helpers for tests that run `sluice run` in-process against the emulator.
#include <chrono>
#include <string>

#include "app/run.hpp"
#include "sluice/sqs/client.hpp"
#include "support/run.hpp"

namespace sluice::test {

// Messages still in the queue, visible or not.
inline int queue_total(boost::asio::io_context& io, sqs::SqsClient& client,
                       const std::string& url) {
  const auto a = run(io, client.get_queue_attributes(url));
  return std::stoi(a.at("ApproximateNumberOfMessages")) +
         std::stoi(a.at("ApproximateNumberOfMessagesNotVisible"));
}

// Runs the pipeline until the queue has been empty for 1.5 s; `exit_code` gets its code.
inline app::RunSummary run_until_drained(const app::PipelineConfig& config, int& exit_code) {
  app::RunOptions options;
  options.until_drained = true;
  options.drained_for = std::chrono::milliseconds(1500);
  options.quiet = true;
  app::RunSummary summary;
  exit_code = app::run_pipeline(config, options, summary);
  return summary;
}

}  // namespace sluice::test
