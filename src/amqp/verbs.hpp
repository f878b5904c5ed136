#pragma once
// The RabbitMQ source's command-line verbs (driver/verbs.hpp), for its driver.
#include "driver/verbs.hpp"

namespace sluice::amqp {

driver::SourceVerbs add_amqp_verbs(const driver::VerbCommands& commands);

}  // namespace sluice::amqp
