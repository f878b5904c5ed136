#pragma once
// A fixture for tests that run `sluice run` in-process against the emulator.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>

#include "app/run.hpp"
#include "sluice/sqs/client.hpp"
#include "support/emulator.hpp"
#include "support/local_sqs.hpp"
#include "support/run.hpp"

namespace sluice::test {

class PipelineFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("AWS_ACCESS_KEY_ID", "AKIDLOCAL", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "local", 1);
    client_ = std::make_shared<sqs::SqsClient>(io_.get_executor(), emulator_client_options());
  }
  // Messages still in the queue, visible or not.
  int queue_total(const std::string& url) {
    const auto a = run(io_, client_->get_queue_attributes(url));
    return std::stoi(a.at("ApproximateNumberOfMessages")) +
           std::stoi(a.at("ApproximateNumberOfMessagesNotVisible"));
  }
  // Runs the pipeline until the queue has been empty for 1.5 s; expects exit code 0.
  app::RunSummary run_until_drained(const app::PipelineConfig& config) {
    app::RunOptions options;
    options.until_drained = true;
    options.drained_for = std::chrono::milliseconds(1500);
    options.quiet = true;
    app::RunSummary summary;
    EXPECT_EQ(app::run_pipeline(config, options, summary), 0);
    return summary;
  }
  boost::asio::io_context io_;
  std::shared_ptr<sqs::SqsClient> client_;
};

}  // namespace sluice::test
