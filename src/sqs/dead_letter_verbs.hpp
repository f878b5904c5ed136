#pragma once
// `sluice dlq stats|peek|redrive`: an SQS dead-letter queue after the fix.
//   stats    its counts, and the reasons of a sample of its messages
//   peek     N messages with their reject reasons, without consuming them (visibility 0)
//   redrive  moves them back to a queue: the service's StartMessageMoveTask when it has
//            one and nothing is to be picked out; otherwise receive, send, and delete
//            only what the destination confirmed, at a capped rate, with progress.
#include <CLI/CLI.hpp>
#include <functional>
#include <optional>

namespace sluice::sqs {

// Adds `dlq` and its verbs to `app`; the function returned runs the verb chosen
// (nullopt when none was).
std::function<std::optional<int>()> add_dead_letter_verbs(CLI::App& app);

}  // namespace sluice::sqs
