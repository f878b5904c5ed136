#pragma once
// The record stage, the heart of the data path: a received message becomes what the
// writers take (sinks/writer.hpp), or is settled here.
//
//   message -> decode -> filter -> normalize -> hash -> route   (pipeline::Transformer)
//     filtered: acked here, nothing written
//     a record: to the writers, which ack it once the database has it
//     rejected (malformed, validation, schema_drift, or unusable as the source gave it):
//       a rejects row to the writers, which ack it once the row is kept
//
// `sluice run` composes one per pipeline (source driver, transform, writers, metrics);
// nothing here knows the command line. Called on the container's worker threads: the
// stage is const apart from the events it reports.

#include <chrono>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "pipeline/transform.hpp"
#include "sinks/writer.hpp"
#include "sluice/driver/source_driver.hpp"
#include "sluice/message.hpp"

namespace sluice::ingest {

// What the stage reports (the pipeline's metrics); any may be empty.
struct StageEvents {
  std::function<void(std::chrono::system_clock::time_point sent,
                     std::chrono::system_clock::time_point received)>
      message_age;
  std::function<void()> filtered;
  std::function<void(const std::string& reason)> rejected;
};

class RecordStage {
 public:
  // `log_fields`: business fields carried in the debug lines of each record.
  RecordStage(std::string pipeline, const pipeline::TransformSpec& transform,
              const driver::SourceDriver& source, std::vector<std::string> log_fields,
              StageEvents events);

  // A received batch: the writers' items, in order; filtered messages are acked here.
  std::vector<sinks::BatchWriter::Item> handle(std::span<Message> batch) const;
  std::optional<sinks::BatchWriter::Item> handle(Message& message) const;
  // A message rejected with `reason`: by the pipeline (malformed, validation, ...) or
  // because the source could not make it usable (its S3 payload missing or too large).
  // Its rejects row goes to the writers, which ack it once the row is kept.
  sinks::BatchWriter::Item unusable(Message& message, const std::string& reason,
                                    const std::string& detail) const;
  // What a rejects row keeps of its message for a replay (RejectRow::properties).
  std::string properties(const Message& message) const;

 private:
  std::string pipeline_;
  const pipeline::Transformer transformer_;
  const driver::SourceDriver& source_;
  std::vector<std::string> log_fields_;
  StageEvents events_;
};

}  // namespace sluice::ingest
