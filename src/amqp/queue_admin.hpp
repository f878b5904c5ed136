#pragma once
// `sluice queue create|stats --amqp-url ...`: RabbitMQ queue operations, and the
// management plugin's HTTP API (unacknowledged counts, which AMQP does not report).
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <memory>
#include <string>

#include "amqp/connection.hpp"
#include "driver/verbs.hpp"
#include "sluice/aws/http.hpp"

namespace sluice::amqp {

// Declares a durable queue (idempotent; a different declaration is PRECONDITION_FAILED,
// exit 2); with `dead_letter_queue`, that one first (of the same type), and the queue
// dead-letters into it through the default exchange. Exit codes as the README says.
int queue_create(const std::string& url, const std::string& queue, QueueDeclaration declaration,
                 const std::string& dead_letter_queue);

// Ready messages and consumers (AMQP's passive queue.declare); with a management URL
// (http://host:15672), ready, unacknowledged and consumers from the management
// plugin's API instead (its figures lag by its statistics interval, 5 s by default).
int queue_stats(const std::string& url, const std::string& queue,
                const std::string& management_url);

struct ManagementCounts {
  long ready = 0;
  long unacknowledged = 0;
  long consumers = 0;
};

// The RabbitMQ management plugin's HTTP API, as the AMQP URL's user (Basic auth).
class ManagementApi {
 public:
  // Throws driver::VerbError naming --amqp-url or --management-url when malformed.
  ManagementApi(boost::asio::any_io_executor executor, const std::string& amqp_url,
                const std::string& management_url);
  // Throws driver::VerbError (refused user, no such queue, an unexpected answer).
  boost::asio::awaitable<ManagementCounts> queue_counts(std::string queue);

 private:
  std::shared_ptr<aws::HttpClient> client_;
  Uri uri_;
  aws::Url api_;
};

}  // namespace sluice::amqp
