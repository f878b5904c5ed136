#include "sluice/message.hpp"

#include <algorithm>
#include <cstring>

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

namespace {
// Index + 1 is a name's one-byte code; 0 starts a name spelled out.
constexpr std::string_view kKnownNames[] = {"AWSTraceHeader",
                                            "ApproximateFirstReceiveTimestamp",
                                            "ApproximateReceiveCount",
                                            "DeadLetterQueueSourceArn",
                                            "MessageDeduplicationId",
                                            "MessageGroupId",
                                            "SenderId",
                                            "SentTimestamp",
                                            "SequenceNumber",
                                            "ContentType",
                                            "CorrelationId",
                                            "Exchange",
                                            "RoutingKey",
                                            "Redelivered"};
}  // namespace

void PackedPairs::append_text(std::string_view text) {
  std::size_t size = text.size();
  do {  // LEB128
    const auto low = static_cast<unsigned char>(size & 0x7f);
    size >>= 7;
    data_.push_back(static_cast<char>(size ? (low | 0x80) : low));
  } while (size);
  data_.append(text);
}

void PackedPairs::add(std::string_view name, std::string_view value) {
  const auto* known = std::find(std::begin(kKnownNames), std::end(kKnownNames), name);
  if (known != std::end(kKnownNames)) {
    data_.push_back(static_cast<char>(known - std::begin(kKnownNames) + 1));
  } else {
    data_.push_back(0);
    append_text(name);
  }
  append_text(value);
}

std::string_view PackedPairs::next_text(std::size_t& at) const {
  std::size_t size = 0;
  for (int shift = 0;; shift += 7) {
    const auto byte = static_cast<unsigned char>(data_[at++]);
    size |= static_cast<std::size_t>(byte & 0x7f) << shift;
    if (!(byte & 0x80)) break;
  }
  const std::string_view text(data_.data() + at, size);
  at += size;
  return text;
}

std::string_view PackedPairs::next_name(std::size_t& at) const {
  const auto code = static_cast<unsigned char>(data_[at++]);
  return code ? kKnownNames[code - 1] : next_text(at);
}

std::optional<std::string_view> PackedPairs::find(std::string_view name) const {
  for (std::size_t at = 0; at < data_.size();) {
    const auto n = next_name(at);
    const auto value = next_text(at);
    if (n == name) return value;
  }
  return std::nullopt;
}

std::map<std::string, std::string> PackedPairs::to_map() const {
  std::map<std::string, std::string> out;
  for_each([&](std::string_view name, std::string_view value) { out.emplace(name, value); });
  return out;
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
namespace {
const detail::MessageState::Maps& maps(detail::MessageState& state) {
  std::call_once(state.maps_once, [&] {
    state.maps = std::make_unique<const detail::MessageState::Maps>(
        detail::MessageState::Maps{state.attributes.to_map(), state.headers.to_map()});
  });
  return *state.maps;
}
}  // namespace

const std::map<std::string, std::string>& Message::attributes() const {
  return maps(*state_).attributes;
}
const std::map<std::string, std::string>& Message::headers() const {
  return maps(*state_).headers;
}
std::optional<std::string_view> Message::attribute(std::string_view name) const {
  return state_->attributes.find(name);
}
std::optional<std::string_view> Message::header(std::string_view name) const {
  return state_->headers.find(name);
}
int Message::receive_count() const {
  return state_->receive_count;
}
std::optional<std::string> Message::group_id() const {
  return state_->group_id;
}
const std::string& Message::source() const {
  static const std::string none;
  return state_->source ? *state_->source : none;
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
