#include "sluice/message.hpp"

#include "runtime/message_state.hpp"

namespace sluice {
namespace detail {

const char* to_string(Outcome outcome) {
  switch (outcome) {
    case Outcome::none:
      return "none";
    case Outcome::ack:
      return "ack";
    case Outcome::retry:
      return "retry";
    case Outcome::release:
      return "release";
    case Outcome::reject:
      return "reject";
    case Outcome::lost:
      return "lost";
  }
  return "unknown";
}

bool MessageState::settle(Outcome o, std::string reason) {
  Outcome expected = Outcome::none;
  if (!outcome.compare_exchange_strong(expected, o)) return false;
  if (auto settler = owner.lock()) settler->settle(shared_from_this(), o, std::move(reason));
  return true;
}

std::int64_t steady_now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace detail

const std::string& Message::id() const {
  return state_->id;
}
const std::string& Message::body() const {
  return state_->body;
}
const std::map<std::string, std::string>& Message::attributes() const {
  return state_->attributes;
}
const std::map<std::string, std::string>& Message::headers() const {
  return state_->headers;
}
int Message::receive_count() const {
  return state_->receive_count;
}
std::optional<std::string> Message::group_id() const {
  return state_->group_id;
}
const std::string& Message::source() const {
  return state_->source;
}
std::chrono::system_clock::time_point Message::received_at() const {
  return state_->received_at;
}
void Message::ack() {
  state_->settle(detail::Outcome::ack);
}
void Message::nack() {
  state_->settle(detail::Outcome::retry);
}
void Message::release() {
  state_->settle(detail::Outcome::release);
}
void Message::reject(std::string reason) {
  state_->settle(detail::Outcome::reject, std::move(reason));
}
bool Message::settled() const {
  return state_->outcome.load() != detail::Outcome::none;
}

}  // namespace sluice
