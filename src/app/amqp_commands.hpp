#pragma once
// `sluice queue create|stats --amqp-url ...`: RabbitMQ queue operations.
#include <string>

namespace sluice::app {

// Declares a durable queue (idempotent; a different declaration is PRECONDITION_FAILED,
// exit 2). Exit codes as the README says.
int amqp_queue_create(const std::string& url, const std::string& queue, bool quorum,
                      const std::string& dead_letter_exchange);

// Ready messages and consumers (AMQP's passive queue.declare); with a management URL
// (http://host:15672), ready, unacknowledged and consumers from the management
// plugin's API instead (its figures lag by its statistics interval, 5 s by default).
int amqp_queue_stats(const std::string& url, const std::string& queue,
                     const std::string& management_url);

}  // namespace sluice::app
