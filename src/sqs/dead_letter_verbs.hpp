#pragma once
// `sluice dlq stats|peek|redrive`: an SQS dead-letter queue after the fix.
//   stats    its counts, and the reasons of a sample of its messages
//   peek     N messages with their reject reasons, without consuming them (visibility 0)
//   redrive  moves them back to a queue: the service's StartMessageMoveTask when it has
//            one and nothing is to be picked out; otherwise receive, send, and delete
//            only what the destination confirmed, at a capped rate, with progress.
#include "driver/verbs.hpp"

namespace sluice::sqs {

// Adds SQS's flags to the binary's `dlq` verbs (--queue-url chooses SQS), and the verbs.
void add_dead_letter_verbs(const driver::VerbCommands& commands, driver::SourceVerbs& verbs);

}  // namespace sluice::sqs
