#include "app/amqp_commands.hpp"

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

namespace sluice::app {
namespace {

int declare_or_inspect(const char* name, const std::string& url, const std::string& queue,
                       bool create, bool quorum, const std::string& dead_letter_exchange) {
  try {
    amqp::ConnectionOptions o;
    o.uri = amqp::parse_uri(url);
    o.connection_name = "sluice-cli";
    amqp::Connection connection(o);
    connection.open_channel(1);
    const auto info = create ? connection.declare_queue(1, queue, quorum, dead_letter_exchange)
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

int amqp_queue_create(const std::string& url, const std::string& queue, bool quorum,
                      const std::string& dead_letter_exchange) {
  if (queue.empty()) {
    std::cerr << "sluice queue create: --name: missing, expected a RabbitMQ queue name\n";
    return 2;
  }
  return declare_or_inspect("queue create", url, queue, true, quorum, dead_letter_exchange);
}

int amqp_queue_stats(const std::string& url, const std::string& queue,
                     const std::string& management_url) {
  if (queue.empty()) {
    std::cerr << "sluice queue stats: --queue: missing, expected a RabbitMQ queue name\n";
    return 2;
  }
  if (management_url.empty())
    return declare_or_inspect("queue stats", url, queue, false, false, "");
  amqp::Uri uri;
  aws::Url api;
  try {
    uri = amqp::parse_uri(url);
  } catch (const std::invalid_argument& e) {
    std::cerr << "sluice queue stats: --amqp-url: " << e.what() << "\n";
    return 2;
  }
  try {
    api = aws::Url::parse(management_url);
  } catch (const aws::AwsError&) {
    std::cerr << "sluice queue stats: --management-url: got '"
              << common::redact_password(management_url)
              << "', expected the management plugin's http(s)://host:port\n";
    return 2;
  }
  // The same user as the AMQP URL, by HTTP Basic authentication.
  aws::HttpRequest request;
  request.url = api;
  // Path segments percent-encoded: the vhost "/" is "%2F".
  request.url.target =
      "/api/queues/" + text::uri_encode(uri.vhost, false) + "/" + text::uri_encode(queue, false);
  request.set_header("Authorization",
                     "Basic " + crypto::base64_encode(uri.user + ":" + uri.password));
  boost::asio::io_context io;
  try {
    aws::HttpClient client(io.get_executor());
    auto answer = boost::asio::co_spawn(io, client.send(request), boost::asio::use_future);
    io.run();
    const auto response = answer.get();
    if (response.status == 401) {
      std::cerr << "sluice queue stats: the management API refused user '" << uri.user
                << "' (401)\n";
      return 2;
    }
    if (response.status == 404) {
      std::cerr << "sluice queue stats: no queue '" << queue << "' in vhost '" << uri.vhost
                << "'\n";
      return 2;
    }
    if (response.status != 200) {
      std::cerr << "sluice queue stats: the management API answered " << response.status << "\n";
      return 1;
    }
    const auto json = nlohmann::json::parse(response.body);
    std::cout << "ready " << json.value("messages_ready", 0L) << "\nunacknowledged "
              << json.value("messages_unacknowledged", 0L) << "\nconsumers "
              << json.value("consumers", 0L) << "\n";
    return 0;
  } catch (const aws::AwsError& e) {
    std::cerr << "sluice queue stats: --management-url: " << e.what() << "\n";
    return 1;
  } catch (const nlohmann::json::exception& e) {
    std::cerr << "sluice queue stats: the management API's answer is not what was expected: "
              << e.what() << "\n";
    return 1;
  }
}

}  // namespace sluice::app
