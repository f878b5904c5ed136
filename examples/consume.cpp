// Usage: example_consume <queue-url>
// A listener container with a typed handler, run until SIGTERM/SIGINT. Region,
// endpoint and credentials come from the environment, as the AWS CLI finds them
// (AWS_ENDPOINT_URL_SQS for a local emulator).
#include <iostream>

#include "sluice/registry.hpp"
#include "sluice/sqs/source.hpp"
#include "sluice/typed_handler.hpp"

struct InventoryEvent {
  std::string sku;
  int quantity = 0;
};
void from_json(const nlohmann::json& j, InventoryEvent& e) {
  e.sku = j.at("skuId").get<std::string>();
  e.quantity = j.at("quantity").get<int>();
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: " << argv[0] << " <queue-url>\n";
    return 2;
  }
  sluice::ContainerOptions options;
  options.name = "inventory";
  options.max_in_flight = 200;                // more than 10 at once, bounded
  sluice::parse_concurrency("2-8", options);  // overlapping long polls, elastic
  auto handler = sluice::typed_handler<InventoryEvent>(
      sluice::json_decoder<InventoryEvent>(), [](InventoryEvent& event, sluice::Message& message) {
        std::cout << message.id() << " " << event.sku << " " << event.quantity << "\n";
      });  // returns normally: acked; throws: retried after a backoff; undecodable: rejected

  sluice::SqsSourceOptions source;  // FIFO queues are detected and kept in order per group
  source.queue_url = argv[1];
  sluice::ContainerRegistry registry;
  registry.add(std::make_unique<sluice::Container>(options, sluice::make_sqs_source(source),
                                                   std::move(handler)));
  registry.run_until_signal(std::chrono::seconds(30));
}
