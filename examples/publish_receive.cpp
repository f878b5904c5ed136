// Usage: example_publish_receive <queue-url>
// Sends one JSON message with the publisher, receives it with a long poll, deletes it.
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <iostream>

#include "sluice/aws/error.hpp"
#include "sluice/sqs/client.hpp"
#include "sluice/sqs/publisher.hpp"

namespace asio = boost::asio;

struct InventoryEvent {
  std::string sku;
  int quantity;
};
void to_json(nlohmann::json& j, const InventoryEvent& e) {
  j = {{"skuId", e.sku}, {"quantity", e.quantity}};
}

asio::awaitable<void> run(std::string queue_url) {
  auto client = std::make_shared<sluice::sqs::SqsClient>(co_await asio::this_coro::executor);
  sluice::sqs::Publisher publisher(client, queue_url);
  // Named, not an aggregate temporary inside the co_await: g++ 12 destroys such a
  // temporary twice (a crash, seen here before the install test ran this example).
  const InventoryEvent event{"SKU-1", 3};
  const auto sent = co_await publisher.publish(event);
  std::cout << "sent " << sent.message_id << "\n";
  sluice::sqs::ReceiveMessageRequest request;
  request.queue_url = queue_url;
  request.wait_time_seconds = 5;
  auto messages = co_await client->receive_message(request);
  for (const auto& m : messages) {
    std::cout << "received " << m.message_id << ": " << m.body << "\n";
    co_await client->delete_message(queue_url, m.receipt_handle);
  }
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: " << argv[0] << " <queue-url>\n";
    return 2;
  }
  asio::io_context io;
  asio::co_spawn(io, run(argv[1]), [](std::exception_ptr e) {
    if (e) try {
        std::rethrow_exception(e);
      } catch (const std::exception& x) {
        std::cerr << x.what() << "\n";
      }
  });
  io.run();
}
