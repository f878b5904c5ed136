#pragma once
// Amazon SQS as a source of `sluice run`: the section source.sqs.* and what the
// binary needs of an SQS queue (driver/source_driver.hpp).

#include "sluice/driver/source_driver.hpp"
#include "sluice/sqs/source.hpp"

namespace sluice::sqs {

struct SqsSettings : driver::SourceSettings {
  SqsSourceOptions source;
};

const driver::SourceDriver& sqs_source_driver();

}  // namespace sluice::sqs
