#pragma once
// The SQS source's command-line verbs (driver/verbs.hpp), for its driver.
#include "driver/verbs.hpp"

namespace sluice::sqs {

driver::SourceVerbs add_sqs_verbs(const driver::VerbCommands& commands);

}  // namespace sluice::sqs
