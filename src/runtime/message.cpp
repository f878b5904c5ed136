#include "sluice/message.hpp"

#include <algorithm>
#include <cstring>

#include "runtime/clock.hpp"
#include "runtime/message_state.hpp"
#include "runtime/message_trace.hpp"

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

bool settle_once(const std::shared_ptr<MessageState>& state, Outcome o, std::string reason) {
  Outcome expected = Outcome::none;
  if (!state->outcome.compare_exchange_strong(expected, o)) return false;
  if (!state->origin) return true;  // not taken by a core yet (tests)
  if (auto settler = state->origin->settler.lock()) settler->settle(state, o, std::move(reason));
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

void append_varint(std::string& to, std::size_t size) {
  do {  // LEB128
    const auto low = static_cast<unsigned char>(size & 0x7f);
    size >>= 7;
    to.push_back(static_cast<char>(size ? (low | 0x80) : low));
  } while (size);
}

std::size_t read_varint(const char* data, std::size_t& at) {
  std::size_t size = 0;
  for (int shift = 0;; shift += 7) {
    const auto byte = static_cast<unsigned char>(data[at++]);
    size |= static_cast<std::size_t>(byte & 0x7f) << shift;
    if (!(byte & 0x80)) return size;
  }
}
}  // namespace

void PackedPairs::append(std::string& to, std::string_view name, std::string_view value) {
  const auto* known = std::find(std::begin(kKnownNames), std::end(kKnownNames), name);
  if (known != std::end(kKnownNames)) {
    to.push_back(static_cast<char>(known - std::begin(kKnownNames) + 1));
  } else {
    to.push_back(0);
    append_varint(to, name.size());
    to.append(name);
  }
  append_varint(to, value.size());
  to.append(value);
}

std::string_view PackedPairs::next_text(std::size_t& at) const {
  const std::size_t size = read_varint(data_.data(), at);
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

std::optional<std::string_view> MessageText::group() const {
  if (!data_) return std::nullopt;
  std::size_t at = 0;
  read_varint(data_.get(), at);  // the id's length
  read_varint(data_.get(), at);  // the receipt's
  if (read_varint(data_.get(), at) == 0) return std::nullopt;
  return part(2);
}

std::string_view MessageText::part(int index) const {
  if (!data_) return {};
  std::size_t at = 0, offset = 0, size = 0;
  for (int i = 0; i < 5; ++i) {
    std::size_t n = read_varint(data_.get(), at);
    if (i == 2 && n) --n;  // the group's length is stored plus one
    if (i < index) offset += n;
    if (i == index) size = n;
  }
  return {data_.get() + at + offset, size};
}

MessageText::Builder& MessageText::Builder::id(std::string_view id) {
  id_.assign(id);
  return *this;
}
MessageText::Builder& MessageText::Builder::receipt(std::string_view receipt) {
  receipt_.assign(receipt);
  return *this;
}
MessageText::Builder& MessageText::Builder::group(std::string_view group) {
  group_.assign(group);
  grouped_ = true;
  return *this;
}
MessageText::Builder& MessageText::Builder::attribute(std::string_view name,
                                                      std::string_view value) {
  PackedPairs::append(attributes_, name, value);
  return *this;
}
MessageText::Builder& MessageText::Builder::header(std::string_view name, std::string_view value) {
  PackedPairs::append(headers_, name, value);
  return *this;
}

MessageText MessageText::Builder::build() {
  struct ClearAfter {  // whatever happens (an allocation failing): the next starts empty
    Builder& builder;
    ~ClearAfter() { builder.clear(); }
  } clear_after{*this};
  std::string lengths;  // short: within the small-string buffer
  append_varint(lengths, id_.size());
  append_varint(lengths, receipt_.size());
  append_varint(lengths, grouped_ ? group_.size() + 1 : 0);
  append_varint(lengths, attributes_.size());
  append_varint(lengths, headers_.size());
  const std::string_view parts[] = {lengths, id_, receipt_, group_, attributes_, headers_};
  std::size_t total = 0;
  for (const auto part : parts) total += part.size();
  MessageText text;
  text.data_ = std::make_unique_for_overwrite<char[]>(total);
  char* out = text.data_.get();
  for (const auto part : parts) out = std::copy(part.begin(), part.end(), out);
  return text;
}

void MessageText::Builder::clear() {
  id_.clear();
  receipt_.clear();
  group_.clear();
  attributes_.clear();
  headers_.clear();
  grouped_ = false;
}

struct MessageState::Rare {
  std::optional<Problem> problem;
  Fetched fetched;
  std::atomic<const Maps*> maps{nullptr};
  ~Rare() { delete maps.load(); }
};

MessageState::MessageState() = default;
MessageState::~MessageState() {
  delete rare_.load();
}

MessageState::Rare& MessageState::rare() {
  if (Rare* made = rare_.load(std::memory_order_acquire)) return *made;
  auto made = std::make_unique<Rare>();
  Rare* expected = nullptr;
  // Two first callers at once (handlers asking for the maps): one's is kept.
  if (rare_.compare_exchange_strong(expected, made.get(), std::memory_order_acq_rel))
    return *made.release();
  return *expected;
}

const MessageState::Problem* MessageState::problem() const {
  const Rare* r = rare_.load(std::memory_order_acquire);
  return r && r->problem ? &*r->problem : nullptr;
}

void MessageState::set_problem(Problem problem) {
  rare().problem = std::move(problem);
}

MessageState::Fetched& MessageState::fetched_payload() {
  return rare().fetched;
}

const std::string& MessageState::queue_body() const {
  static const std::string none;
  const Rare* r = rare_.load(std::memory_order_acquire);
  return r ? r->fetched.queue_body : none;
}

const MessageState::Maps& MessageState::built_maps() {
  Rare& r = rare();
  if (const Maps* built = r.maps.load(std::memory_order_acquire)) return *built;
  auto made =
      std::make_unique<const Maps>(Maps{text.attributes().to_map(), text.headers().to_map()});
  const Maps* expected = nullptr;
  // Two first callers at once: one's maps are kept, the other's dropped.
  if (r.maps.compare_exchange_strong(expected, made.get(), std::memory_order_acq_rel))
    return *made.release();
  return *expected;
}

std::int64_t steady_now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             runtime::CoreClock::now().time_since_epoch())
      .count();
}

}  // namespace detail

std::string_view Message::id() const {
  return state_->text.id();
}
const std::string& Message::body() const {
  return state_->body;
}
const std::map<std::string, std::string>& Message::attributes() const {
  return state_->built_maps().attributes;
}
const std::map<std::string, std::string>& Message::headers() const {
  return state_->built_maps().headers;
}
std::optional<std::string_view> Message::attribute(std::string_view name) const {
  return state_->text.attributes().find(name);
}
std::optional<std::string_view> Message::header(std::string_view name) const {
  return state_->text.headers().find(name);
}
int Message::receive_count() const {
  return state_->receive_count;
}
std::optional<std::string> Message::group_id() const {
  const auto group = state_->text.group();
  return group ? std::optional<std::string>(*group) : std::nullopt;
}
const std::string& Message::source() const {
  static const std::string none;
  return state_->origin ? state_->origin->source : none;
}
std::chrono::system_clock::time_point Message::received_at() const {
  return state_->received_at;
}
void Message::ack() {
  detail::settle_once(state_, detail::Outcome::ack);
}
void Message::nack() {
  detail::settle_once(state_, detail::Outcome::retry);
}
void Message::release() {
  detail::settle_once(state_, detail::Outcome::release);
}
void Message::reject(std::string reason) {
  detail::settle_once(state_, detail::Outcome::reject, std::move(reason));
}
bool Message::settled() const {
  return state_->outcome.load() != detail::Outcome::none;
}
const tracing::SpanContext* Message::trace_context() const {
  auto* trace = state_->trace.get();
  if (!trace) return nullptr;
  std::lock_guard lock(trace->mutex);
  return trace->started ? &trace->process.context() : nullptr;
}
void Message::set_trace_attribute(std::string_view key, std::string_view value) {
  auto* trace = state_->trace.get();
  if (!trace) return;
  std::lock_guard lock(trace->mutex);
  if (trace->process.recording()) trace->process.set_attribute(key, std::string(value));
}
void Message::set_trace_error(std::string_view type, std::string_view description) {
  auto* trace = state_->trace.get();
  if (!trace) return;
  std::lock_guard lock(trace->mutex);
  if (!trace->process.recording()) return;
  trace->process.set_attribute("error.type", std::string(type));
  trace->process.set_error(description);
}

}  // namespace sluice
