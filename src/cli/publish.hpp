#pragma once
#include <string>
#include <vector>

#include "driver/verbs.hpp"

namespace sluice::app {

// What `sluice publish` sends, whatever the queue: a JSON-lines file or generated
// inventory events. Where to is each source's (its driver's verbs, driver/verbs.hpp).
struct PublishOptions {
  std::string file;              // JSON lines; empty: generate events
  int generate = 1000;           // generated inventory events
  double duplicate_share = 0.2;  // share of generated events that repeat an earlier business record
  double malformed_share = 0.0;  // share of generated events that are broken on purpose
  int concurrency = 4;           // batches in flight at once
  bool progress = true;
  unsigned seed = 1;
  std::string events = "inventory";  // what --generate makes: inventory or orders
  std::vector<std::string> headers;  // NAME=VALUE on every message
  std::string traceparent;           // --traceparent; empty: TRACEPARENT from the environment
  // A share of the events padded to large_bytes (a "padding" field), to exercise large
  // payloads.
  double large_share = 0.0;
  std::size_t large_bytes = 1100 * 1024;
};

// Returns the exit code: 0 all sent, 1 some failed, 2 bad input.
// The first source whose choosing flag was given publishes. Exit code: 0 all sent, 1
// some failed, 2 bad input.
int run_publish(const PublishOptions& options, const std::vector<driver::SourceVerbs>& sources);

// The generated stream, for tests: each line a JSON body (or a broken one), and how
// many distinct business records (skuId, locationId, eventType, quantity) it holds.
struct GeneratedEvents {
  std::vector<std::string> bodies;
  std::size_t distinct_records = 0;
  std::size_t malformed = 0;
};
GeneratedEvents generate_events(int count, double duplicate_share, double malformed_share,
                                unsigned seed);
// Order events for examples/orders-pipeline.yaml (order_events.cpp): version-1 and
// version-2 payloads, duplicates written the ways producers differ; a business record
// is (orderId, customer, placedAt, amount, currency, status).
GeneratedEvents generate_order_events(int count, double duplicate_share, double malformed_share,
                                      unsigned seed);
// Pads about `share` of the JSON-object bodies to `bytes` with a "padding" string field
// (their business record unchanged); returns how many.
std::size_t pad_events(std::vector<std::string>& bodies, double share, std::size_t bytes,
                       unsigned seed);

}  // namespace sluice::app
