#pragma once
// Amazon SQS as a container's source (standard and FIFO queues):
//
//   sluice::Container container(options, sluice::make_sqs_source({queue_url}), handler);
//
// Receives are long polls of up to 10 messages; acks become batched DeleteMessageBatch
// calls (flushed on stop); retries and releases become visibility changes; the
// heartbeat extends visibility; rejects go to the dead-letter queue with their reason.
// With large_payloads, bodies stored in S3 by the extended clients are fetched first.
// A FIFO queue (its FifoQueue attribute) has its message groups kept in order.

#include <chrono>
#include <string>

#include "sluice/source.hpp"
#include "sluice/sqs/client.hpp"
#include "sluice/sqs/large_payload.hpp"

namespace sluice {

enum class FifoMode {
  auto_detect,  // the queue's FifoQueue attribute (its URL's ".fifo" if unreadable)
  on,
  off,
};

struct SqsSourceOptions {
  std::string queue_url;
  sqs::SqsClientOptions client;
  FifoMode fifo = FifoMode::auto_detect;
  int max_messages_per_poll = 10;                        // 1..10
  std::chrono::seconds poll_wait{20};                    // long poll, 0..20 s
  std::chrono::seconds visibility_timeout{30};           // asked for on every receive, 1 s..12 h
  int delete_batch_size = 10;                            // deletes sent at this many (1..10) ...
  std::chrono::milliseconds delete_flush_interval{100};  // ... or after this long
  std::string dead_letter_queue_url;  // where rejects go (empty: the queue's redrive policy)
  // S3 pointers of the extended clients resolved before the handler sees the message
  // (sluice/sqs/large_payload.hpp); the S3 client's region defaults to the queue's.
  sqs::LargePayloadOptions large_payloads;
};

// Throws std::invalid_argument naming the option, its value and what was expected.
void validate(const SqsSourceOptions& options);

// Validates the options; the source is made (and its client built) when the container starts.
SourceFactory make_sqs_source(SqsSourceOptions options);

}  // namespace sluice
