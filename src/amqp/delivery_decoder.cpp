#include "amqp/delivery_decoder.hpp"

#include <optional>
#include <string>

#include "amqp/connection.hpp"
#include "amqp/message_text.hpp"
#include "common/crypto.hpp"

namespace sluice::amqp {
std::string DeliveryDecoder::message_id(const amqp_message_t& message) {
  const auto& p = message.properties;
  std::string id;
  if (p._flags & AMQP_BASIC_MESSAGE_ID_FLAG) id = text(p.message_id);
  if (id.empty()) id = "sha256:" + crypto::sha256_hex(text(message.body)).substr(0, 32);
  return id;
}

spi::Delivery DeliveryDecoder::build(const amqp_basic_deliver_t& deliver,
                                     const amqp_message_t& message, std::uint64_t lease,
                                     const std::string& id, int failures_seen) {
  builder_.clear();  // whatever an earlier delivery that threw left
  const auto& p = message.properties;
  int delivery_count = -1;
  if (p._flags & AMQP_BASIC_HEADERS_FLAG) {
    for (int i = 0; i < p.headers.num_entries; ++i) {
      const auto& e = p.headers.entries[i];
      auto value = field_text(e.value);
      if (!value) continue;
      const std::string key = text(e.key);
      if (key == "x-delivery-count") {
        try {
          delivery_count = std::stoi(*value);
        } catch (...) {
        }
      }
      builder_.header(key, *value);
    }
  }
  if (p._flags & AMQP_BASIC_TIMESTAMP_FLAG)
    builder_.attribute("SentTimestamp", std::to_string(p.timestamp * 1000));
  if (p._flags & AMQP_BASIC_CONTENT_TYPE_FLAG)
    builder_.attribute("ContentType", text(p.content_type));
  if (p._flags & AMQP_BASIC_CORRELATION_ID_FLAG)
    builder_.attribute("CorrelationId", text(p.correlation_id));
  builder_.attribute("Exchange", text(deliver.exchange));
  builder_.attribute("RoutingKey", text(deliver.routing_key));
  builder_.attribute("Redelivered", deliver.redelivered ? "true" : "false");
  if (!group_.empty()) builder_.group(group_);
  // Quorum queues count deliveries (x-delivery-count: earlier returns); classic queues
  // only flag a redelivery, so failures seen here are counted by id too. (The
  // redelivered flag is not a failure: a consumer stopped, a connection lost.)
  return builder_.id(id)
      .receipt(std::to_string(deliver.delivery_tag))
      .body(text(message.body))
      .receive_count(std::max(delivery_count >= 0 ? delivery_count + 1 : 1, failures_seen + 1))
      .lease(lease)
      .build();
}

}  // namespace sluice::amqp
