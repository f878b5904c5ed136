#pragma once
// `sluice round-trip`: a raw SQS round trip, no pipeline.
#include <string>

namespace sluice::sqs {

struct RoundTripOptions {
  std::string endpoint_url;  // empty: the usual AWS lookup
  std::string region;
  std::string queue_name = "sluice-demo";
  int messages = 1000;
  int concurrent_receives = 4;
  bool keep_queue = false;
};

// Creates a queue, publishes `messages` JSON events in batches, drains them with
// overlapping long polls and batched deletes, checks every message came back once,
// prints a summary. Returns the process exit code.
int run_round_trip(const RoundTripOptions& options);

}  // namespace sluice::sqs
