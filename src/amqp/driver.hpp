#pragma once
// RabbitMQ as a source of `sluice run`: the section source.rabbitmq.* and what the
// binary needs of a RabbitMQ queue (driver/source_driver.hpp).

#include "sluice/amqp/source.hpp"
#include "sluice/driver/source_driver.hpp"

namespace sluice::amqp {

struct AmqpSettings : driver::SourceSettings {
  AmqpSourceOptions source;
  bool dead_letter_exchange = false;  // rejects also go to the queue's dead-letter exchange
  int delivery_limit = 0;  // the quorum queue's x-delivery-limit, as far as Sluice knows it
};

const driver::SourceDriver& amqp_source_driver();

}  // namespace sluice::amqp
