#pragma once
// A message as a source hands it to the container: made by a DeliveryBuilder, read
// through the functions below. The core and the source share it until it is settled;
// its insides are the core's (a source of your own never sees them), so a source
// stores the text it needs to settle a message (its receipt) in the delivery itself.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace sluice::detail {
struct MessageState;
}  // namespace sluice::detail

namespace sluice::spi {

using Delivery = std::shared_ptr<detail::MessageState>;

// Collects one message's parts, in any order, and makes the delivery. Keep one per
// receive loop (it is not thread-safe): its buffers keep their capacity from message
// to message.
class DeliveryBuilder {
 public:
  DeliveryBuilder();
  ~DeliveryBuilder();
  DeliveryBuilder(const DeliveryBuilder&) = delete;
  DeliveryBuilder& operator=(const DeliveryBuilder&) = delete;

  DeliveryBuilder& id(std::string_view id);  // what Message::id() says
  // What the source needs to settle it (an SQS receipt handle, an AMQP delivery tag,
  // a file position): receipt_of() gives it back.
  DeliveryBuilder& receipt(std::string_view receipt);
  // It belongs to an ordered group (with SourceCapabilities::ordered_groups).
  DeliveryBuilder& group(std::string_view group);
  DeliveryBuilder& attribute(std::string_view name, std::string_view value);  // system
  DeliveryBuilder& header(std::string_view name, std::string_view value);     // application
  DeliveryBuilder& body(std::string body);
  DeliveryBuilder& receive_count(int count);  // 1 on the first delivery (the default)
  DeliveryBuilder& received_at(std::chrono::system_clock::time_point at);  // default: now
  // The lease it is held under (an AMQP channel, say), for SourceContext::lease_lost.
  DeliveryBuilder& lease(std::uint64_t lease);
  // Extendable sources: when the lease runs out unless extended (default: the
  // capabilities' `lease` from when the core takes the message).
  DeliveryBuilder& lease_until(std::chrono::steady_clock::time_point until);
  // It cannot be handed to a handler: the core settles it so, without one (retry:
  // delivered again; else rejected with `reason`, e.g. "line_too_long").
  DeliveryBuilder& problem(bool retry, std::string reason, std::string detail);

  // The delivery; the builder is empty afterwards, also when this throws.
  Delivery build();
  void clear();  // drops what was collected (a message abandoned half-way)

 private:
  struct Parts;
  std::unique_ptr<Parts> parts_;
};

std::string_view id_of(const Delivery& delivery);
// " trace_id=<32 hex>" for a log line about a traced delivery, else "".
std::string trace_field_of(const Delivery& delivery);
std::string_view receipt_of(const Delivery& delivery);
std::optional<std::string_view> group_of(const Delivery& delivery);
const std::string& body_of(const Delivery& delivery);
int receive_count_of(const Delivery& delivery);
std::chrono::system_clock::time_point received_at_of(const Delivery& delivery);
std::uint64_t lease_of(const Delivery& delivery);
std::optional<std::string_view> attribute_of(const Delivery& delivery, std::string_view name);
std::optional<std::string_view> header_of(const Delivery& delivery, std::string_view name);
// Every header, in the order added.
void for_each_header(const Delivery& delivery,
                     const std::function<void(std::string_view name, std::string_view value)>& f);

// Extendable sources: the lease was extended to `until`.
void set_lease_until(const Delivery& delivery, std::chrono::steady_clock::time_point until);

// From Source::prepare(), on a worker: the message cannot be made ready (see
// DeliveryBuilder::problem), in place of any problem set before.
void set_problem(const Delivery& delivery, bool retry, std::string reason, std::string detail);
bool has_problem(const Delivery& delivery);
// From Source::prepare(): the body becomes `payload` (fetched from elsewhere, an S3
// pointer's object, say); queue_body_of() keeps what the queue held. `resources` are
// held as long as the message is (a reservation of the payload's bytes).
void replace_body(const Delivery& delivery, std::string payload);
void hold_with(const Delivery& delivery, std::shared_ptr<void> resources);
const std::string& queue_body_of(const Delivery& delivery);  // empty: not replaced

}  // namespace sluice::spi
