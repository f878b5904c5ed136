#pragma once
// A fixture for tests that run `sluice run` in-process against the emulator.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "app/run.hpp"
#include "cli/publish.hpp"
#include "sluice/sqs/client.hpp"
#include "sluice/sqs/publisher.hpp"
#include "support/emulator.hpp"
#include "support/local_sqs.hpp"
#include "support/run.hpp"

namespace sluice::test {

// normalize and identity for generated inventory events (app::generate_events), as
// top-level YAML.
inline const char* const kInventoryNormalizeYaml =
    "normalize:\n  fields:\n"
    "    - {name: skuId, from: /skuId, type: string, required: true}\n"
    "    - {name: locationId, from: /locationId, type: string, required: true}\n"
    "    - {name: eventType, from: /eventType, type: string, required: true}\n"
    "    - {name: quantity, from: /quantity, type: integer, required: true}\n"
    "identity:\n  versions:\n    V1: [skuId, locationId, eventType, quantity]\n";

// A SQLite database and its WAL files (the pipeline leaves -wal/-shm beside it).
inline void remove_sqlite(const std::string& path) {
  for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path + suffix);
}

class PipelineFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("AWS_ACCESS_KEY_ID", "AKIDLOCAL", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "local", 1);
    client_ = std::make_shared<sqs::SqsClient>(io_.get_executor(), emulator_client_options());
  }
  std::string make_queue(const std::string& prefix) {
    const std::string name = unique_queue_name(prefix);
    run(io_, client_->create_queue(name));
    return Emulator::shared().queue_url(name);
  }
  // Generated inventory events (`sluice publish --generate`'s), published in batches.
  app::GeneratedEvents publish(const std::string& url, int count, double duplicates,
                               double malformed, unsigned seed) {
    auto events = app::generate_events(count, duplicates, malformed, seed);
    std::vector<sqs::SendMessageEntry> entries;
    for (const auto& body : events.bodies) entries.push_back({"", body, {}, {}, {}, {}, {}});
    sqs::Publisher publisher(client_, url);
    for (const auto& o : run(io_, publisher.send_batch(std::move(entries))))
      EXPECT_TRUE(o.ok) << o.error_message;
    return events;
  }
  // Messages still in the queue, visible or not.
  int queue_total(const std::string& url) {
    return Emulator::all_messages(run(io_, client_->get_queue_attributes(url)));
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
