// Usage: example_consume_rabbitmq <amqp-url> <queue>
// The README's RabbitMQ example as a program: publishes three typed events with
// confirms, then consumes the queue with consumers scaling between 2 and 8 and a typed
// handler, until SIGTERM/SIGINT.
#include <iostream>

#include "sluice/amqp/publisher.hpp"
#include "sluice/amqp/source.hpp"
#include "sluice/registry.hpp"
#include "sluice/typed_handler.hpp"

struct InventoryEvent {
  std::string sku;
  int quantity = 0;
};
void to_json(nlohmann::json& j, const InventoryEvent& e) {
  j = {{"skuId", e.sku}, {"quantity", e.quantity}};
}
void from_json(const nlohmann::json& j, InventoryEvent& e) {
  e.sku = j.at("skuId").get<std::string>();
  e.quantity = j.at("quantity").get<int>();
}

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: " << argv[0] << " <amqp-url> <queue>\n";
    return 2;
  }
  sluice::AmqpSourceOptions amqp;
  amqp.uri = argv[1];
  amqp.queue = argv[2];
  amqp.min_consumers = 2;
  amqp.max_consumers = 8;

  sluice::amqp::PublisherOptions publishing;
  publishing.uri = amqp.uri;
  sluice::amqp::Publisher publisher(publishing);  // confirms, mandatory
  const std::vector<InventoryEvent> events{{"SKU-1", 3}, {"SKU-2", 5}, {"SKU-1", 3}};
  const auto report = publisher.publish("", amqp.queue, events);  // typed, as JSON
  std::cout << report.confirmed << " published\n";

  sluice::ContainerOptions options;
  options.name = "inventory";
  options.max_in_flight = 2000;  // never more unacknowledged deliveries than this
  auto handler = sluice::typed_handler<InventoryEvent>(
      sluice::json_decoder<InventoryEvent>(), [](InventoryEvent& event, sluice::Message& message) {
        std::cout << message.id() << " " << event.sku << " " << event.quantity << "\n";
      });
  sluice::ContainerRegistry registry;
  registry.add(std::make_unique<sluice::Container>(options, sluice::make_amqp_source(amqp),
                                                   std::move(handler)));
  registry.run_until_signal(std::chrono::seconds(30));
}
