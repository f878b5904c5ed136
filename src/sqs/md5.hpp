#pragma once
#include <string>

#include "sluice/sqs/types.hpp"

namespace sluice::sqs {
// The digest SQS returns as MD5OfMessageAttributes: names sorted, each encoded as
// length-prefixed name, data type, a transport byte (1 string, 2 binary) and value.
std::string md5_of_message_attributes(const MessageAttributes& attributes);
}  // namespace sluice::sqs
