// The source SPI's deliveries over the core's message state.
#include "sluice/spi/delivery.hpp"

#include <utility>

#include "runtime/message_state.hpp"
#include "runtime/message_trace.hpp"

namespace sluice::spi {

struct DeliveryBuilder::Parts {
  detail::MessageText::Builder text;
  std::string body;
  int receive_count = 1;
  std::optional<std::chrono::system_clock::time_point> received_at;
  std::uint64_t lease = 0;
  std::int64_t lease_until_ms = 0;
  std::optional<detail::MessageState::Problem> problem;
};

DeliveryBuilder::DeliveryBuilder() : parts_(std::make_unique<Parts>()) {}
DeliveryBuilder::~DeliveryBuilder() = default;

DeliveryBuilder& DeliveryBuilder::id(std::string_view id) {
  parts_->text.id(id);
  return *this;
}
DeliveryBuilder& DeliveryBuilder::receipt(std::string_view receipt) {
  parts_->text.receipt(receipt);
  return *this;
}
DeliveryBuilder& DeliveryBuilder::group(std::string_view group) {
  parts_->text.group(group);
  return *this;
}
DeliveryBuilder& DeliveryBuilder::attribute(std::string_view name, std::string_view value) {
  parts_->text.attribute(name, value);
  return *this;
}
DeliveryBuilder& DeliveryBuilder::header(std::string_view name, std::string_view value) {
  parts_->text.header(name, value);
  return *this;
}
DeliveryBuilder& DeliveryBuilder::body(std::string body) {
  parts_->body = std::move(body);
  return *this;
}
DeliveryBuilder& DeliveryBuilder::receive_count(int count) {
  parts_->receive_count = count;
  return *this;
}
DeliveryBuilder& DeliveryBuilder::received_at(std::chrono::system_clock::time_point at) {
  parts_->received_at = at;
  return *this;
}
DeliveryBuilder& DeliveryBuilder::lease(std::uint64_t lease) {
  parts_->lease = lease;
  return *this;
}
DeliveryBuilder& DeliveryBuilder::lease_until(std::chrono::steady_clock::time_point until) {
  parts_->lease_until_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(until.time_since_epoch()).count();
  return *this;
}
DeliveryBuilder& DeliveryBuilder::problem(bool retry, std::string reason, std::string detail) {
  parts_->problem = detail::MessageState::Problem{retry, std::move(reason), std::move(detail)};
  return *this;
}

Delivery DeliveryBuilder::build() {
  struct ClearAfter {  // whatever happens: the next message starts empty
    DeliveryBuilder& builder;
    ~ClearAfter() { builder.clear(); }
  } clear_after{*this};
  auto state = std::make_shared<detail::MessageState>();
  state->text = parts_->text.build();
  state->body = std::move(parts_->body);
  state->receive_count = parts_->receive_count;
  state->received_at = parts_->received_at.value_or(std::chrono::system_clock::now());
  state->lease = parts_->lease;
  state->visible_until_ms = parts_->lease_until_ms;
  if (parts_->problem) state->set_problem(std::move(*parts_->problem));
  return state;
}

void DeliveryBuilder::clear() {
  parts_->text.clear();
  parts_->body.clear();  // moved from, or abandoned: its capacity goes with the message
  parts_->receive_count = 1;
  parts_->received_at.reset();
  parts_->lease = 0;
  parts_->lease_until_ms = 0;
  parts_->problem.reset();
}

std::string_view id_of(const Delivery& delivery) {
  return delivery->text.id();
}
std::string trace_field_of(const Delivery& delivery) {
  return runtime::trace_field(*delivery);
}
std::string_view receipt_of(const Delivery& delivery) {
  return delivery->text.receipt();
}
std::optional<std::string_view> group_of(const Delivery& delivery) {
  return delivery->text.group();
}
const std::string& body_of(const Delivery& delivery) {
  return delivery->body;
}
int receive_count_of(const Delivery& delivery) {
  return delivery->receive_count;
}
std::chrono::system_clock::time_point received_at_of(const Delivery& delivery) {
  return delivery->received_at;
}
std::uint64_t lease_of(const Delivery& delivery) {
  return delivery->lease;
}
std::optional<std::string_view> attribute_of(const Delivery& delivery, std::string_view name) {
  return delivery->text.attributes().find(name);
}
std::optional<std::string_view> header_of(const Delivery& delivery, std::string_view name) {
  return delivery->text.headers().find(name);
}
void for_each_header(const Delivery& delivery,
                     const std::function<void(std::string_view, std::string_view)>& f) {
  delivery->text.headers().for_each(f);
}

void set_lease_until(const Delivery& delivery, std::chrono::steady_clock::time_point until) {
  delivery->visible_until_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(until.time_since_epoch()).count();
}

void set_problem(const Delivery& delivery, bool retry, std::string reason, std::string detail) {
  delivery->set_problem({retry, std::move(reason), std::move(detail)});
}
bool has_problem(const Delivery& delivery) {
  return delivery->problem() != nullptr;
}
void replace_body(const Delivery& delivery, std::string payload) {
  delivery->fetched_payload().queue_body = std::exchange(delivery->body, std::move(payload));
}
void hold_with(const Delivery& delivery, std::shared_ptr<void> resources) {
  delivery->fetched_payload().resources = std::move(resources);
}
const std::string& queue_body_of(const Delivery& delivery) {
  return delivery->queue_body();
}

}  // namespace sluice::spi
