#pragma once
// `sluice dlq stats|peek|redrive --queue NAME`: a RabbitMQ dead-letter queue after the fix.
//   stats    its counts, and the reasons of a sample of its messages
//   peek     N messages with their reasons: fetched unacknowledged, then requeued
//   redrive  moves them to a queue (--to, through the default exchange) or an exchange
//            (--to-exchange), each published with confirms and acknowledged in the
//            dead-letter queue only once the broker confirmed it; at a capped rate, with
//            progress. What is picked out or refused stays, requeued at the end.
// A dead letter's reason: its sluice-reject-reason header when it has one, else the
// broker's (x-death: rejected, expired, maxlen, delivery_limit).
#include "driver/verbs.hpp"

namespace sluice::amqp {

// Adds RabbitMQ's flags to the binary's `dlq` verbs (--queue chooses RabbitMQ).
void add_dead_letter_verbs(const driver::VerbCommands& commands, driver::SourceVerbs& verbs);

}  // namespace sluice::amqp
