#pragma once
// The SQS source's command-line verbs (driver/verbs.hpp), for its driver.
#include "driver/verbs.hpp"
#include "sluice/aws/error.hpp"

namespace sluice::sqs {

// The exit code an SQS error means for a command: the user's to fix (2) or not (1).
inline int exit_code_of(const aws::AwsError& e) {
  const bool users_to_fix = e.kind() == aws::ErrorKind::configuration ||
                            e.code() == "QueueDoesNotExist" ||
                            e.code().ends_with("NonExistentQueue");
  return users_to_fix ? 2 : 1;
}

driver::SourceVerbs add_sqs_verbs(const driver::VerbCommands& commands);

}  // namespace sluice::sqs
