#pragma once
// A basic.deliver and its content as a delivery of the source SPI: the message id (or
// a digest of the body when the publisher set none), headers as text, the properties a
// pipeline reads (SentTimestamp from the timestamp property, ContentType,
// CorrelationId, Exchange, RoutingKey, Redelivered), and the receive count: the
// broker's x-delivery-count (quorum queues) or, for classic queues that count nothing,
// the failures this process saw of that message id. On the connection thread.
#include <amqp.h>

#include <cstdint>
#include <string>

#include "sluice/spi/delivery.hpp"

namespace sluice::amqp {

class DeliveryDecoder {
 public:
  // Every delivery belongs to this ordered group (a single-active-consumer queue is
  // one); empty: none.
  explicit DeliveryDecoder(std::string group = {}) : group_(std::move(group)) {}

  struct Decoded {
    spi::Delivery delivery;
    std::string id;
  };
  // `failures_seen(id)`: how often this process saw the message fail.
  template <class FailuresSeen>
  Decoded decode(const amqp_basic_deliver_t& deliver, const amqp_message_t& message,
                 std::uint64_t lease, FailuresSeen failures_seen) {
    auto id = message_id(message);
    return {build(deliver, message, lease, id, failures_seen(id)), id};
  }

 private:
  static std::string message_id(const amqp_message_t& message);
  spi::Delivery build(const amqp_basic_deliver_t& deliver, const amqp_message_t& message,
                      std::uint64_t lease, const std::string& id, int failures_seen);
  std::string group_;
  spi::DeliveryBuilder builder_;  // kept: its buffers keep their capacity
};

}  // namespace sluice::amqp
