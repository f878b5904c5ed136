#include "amqp/queue_admin.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#include <iostream>
#include <nlohmann/json.hpp>

#include "amqp/connection.hpp"
#include "aws/text.hpp"
#include "common/crypto.hpp"
#include "common/redact.hpp"
#include "sluice/aws/error.hpp"
#include "sluice/aws/http.hpp"

namespace sluice::amqp {
namespace {

int declare_or_inspect(const char* name, const std::string& url, const std::string& queue,
                       bool create, const QueueDeclaration& declaration = {},
                       const std::string& dead_letter_queue = "") {
  try {
    amqp::ConnectionOptions o;
    o.uri = amqp::parse_uri(url);
    o.connection_name = "sluice-cli";
    amqp::Connection connection(o);
    connection.open_channel(1);
    if (create && !dead_letter_queue.empty()) {
      QueueDeclaration dead_letters;  // of the same type
      dead_letters.quorum = declaration.quorum;
      connection.declare_queue(1, dead_letter_queue, dead_letters);
    }
    const auto info = create ? connection.declare_queue(1, queue, declaration)
                             : connection.inspect_queue(1, queue);
    if (create)
      std::cout << queue << "\n";
    else
      std::cout << "ready " << info.messages << "\nconsumers " << info.consumers
                << "\nunacknowledged ? (AMQP does not report it: add --management-url)\n";
    return 0;
  } catch (const std::invalid_argument& e) {
    std::cerr << "sluice " << name << ": --amqp-url: " << e.what() << "\n";
    return 2;
  } catch (const amqp::AmqpError& e) {
    std::cerr << "sluice " << name << ": " << e.what() << "\n";
    // Refused login, a missing queue, a queue declared otherwise: the user's to fix.
    return e.kind() == amqp::AmqpError::Kind::auth || e.not_found() || e.reply_code() == 406 ? 2
                                                                                             : 1;
  }
}

}  // namespace

int queue_create(const std::string& url, const std::string& queue, QueueDeclaration declaration,
                 const std::string& dead_letter_queue) {
  if (queue.empty()) {
    std::cerr << "sluice queue create: --name: missing, expected a RabbitMQ queue name\n";
    return 2;
  }
  if (!dead_letter_queue.empty() && !declaration.dead_letter_exchange.empty()) {
    std::cerr << "sluice queue create: --dead-letter-queue and --dead-letter-exchange: give one "
                 "(--dead-letter-queue dead-letters through the default exchange)\n";
    return 2;
  }
  if (dead_letter_queue == queue) {
    std::cerr << "sluice queue create: --dead-letter-queue is the queue itself\n";
    return 2;
  }
  if (declaration.stream &&
      (declaration.quorum || declaration.single_active_consumer || declaration.delivery_limit > 0 ||
       !dead_letter_queue.empty() || !declaration.dead_letter_exchange.empty())) {
    std::cerr << "sluice queue create: --stream: a stream is neither quorum nor single active "
                 "consumer, and has no delivery limit or dead-lettering (give --stream alone)\n";
    return 2;
  }
  if (declaration.delivery_limit > 0 && !declaration.quorum) {
    std::cerr << "sluice queue create: --delivery-limit: only quorum queues have one (add "
                 "--quorum)\n";
    return 2;
  }
  declaration.dead_letter_routing_key = dead_letter_queue;
  return declare_or_inspect("queue create", url, queue, true, declaration, dead_letter_queue);
}

ManagementApi::ManagementApi(boost::asio::any_io_executor executor, const std::string& amqp_url,
                             const std::string& management_url)
    : client_(std::make_shared<aws::HttpClient>(std::move(executor))) {
  try {
    uri_ = amqp::parse_uri(amqp_url);
  } catch (const std::invalid_argument& e) {
    throw driver::VerbError(2, std::string("--amqp-url: ") + e.what());
  }
  try {
    api_ = aws::Url::parse(management_url);
  } catch (const aws::AwsError&) {
    throw driver::VerbError(2, "--management-url: got '" + common::redact_password(management_url) +
                                   "', expected the management plugin's http(s)://host:port");
  }
}

boost::asio::awaitable<ManagementCounts> ManagementApi::queue_counts(std::string queue) {
  // The same user as the AMQP URL, by HTTP Basic authentication.
  aws::HttpRequest request;
  request.url = api_;
  // Path segments percent-encoded: the vhost "/" is "%2F".
  request.url.target =
      "/api/queues/" + text::uri_encode(uri_.vhost, false) + "/" + text::uri_encode(queue, false);
  request.set_header("Authorization",
                     "Basic " + crypto::base64_encode(uri_.user + ":" + uri_.password));
  aws::HttpResponse response;
  try {
    auto client = client_;
    response = co_await client->send(request);
  } catch (const aws::AwsError& e) {
    throw driver::VerbError(1, std::string("--management-url: ") + e.what());
  }
  if (response.status == 401)
    throw driver::VerbError(2, "the management API refused user '" + uri_.user + "' (401)");
  if (response.status == 404)
    throw driver::VerbError(2, "no queue '" + queue + "' in vhost '" + uri_.vhost + "'");
  if (response.status != 200)
    throw driver::VerbError(1, "the management API answered " + std::to_string(response.status));
  try {
    const auto json = nlohmann::json::parse(response.body);
    co_return ManagementCounts{json.value("messages_ready", 0L),
                               json.value("messages_unacknowledged", 0L),
                               json.value("consumers", 0L)};
  } catch (const nlohmann::json::exception& e) {
    throw driver::VerbError(
        1, std::string("the management API's answer is not what was expected: ") + e.what());
  }
}

int queue_stats(const std::string& url, const std::string& queue,
                const std::string& management_url) {
  if (queue.empty()) {
    std::cerr << "sluice queue stats: --queue: missing, expected a RabbitMQ queue name\n";
    return 2;
  }
  if (management_url.empty()) return declare_or_inspect("queue stats", url, queue, false);
  boost::asio::io_context io;
  try {
    ManagementApi api(io.get_executor(), url, management_url);
    auto answer = boost::asio::co_spawn(io, api.queue_counts(queue), boost::asio::use_future);
    io.run();
    const auto counts = answer.get();
    std::cout << "ready " << counts.ready << "\nunacknowledged " << counts.unacknowledged
              << "\nconsumers " << counts.consumers << "\n";
    return 0;
  } catch (const driver::VerbError& e) {
    std::cerr << "sluice queue stats: " << e.what() << "\n";
    return e.exit_code();
  }
}

}  // namespace sluice::amqp
