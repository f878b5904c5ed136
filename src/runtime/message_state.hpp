#pragma once
// The shared state behind a sluice::Message; internal to the runtime and its sources.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "sluice/message.hpp"

namespace sluice::detail {

// How a message ended. `lost` is never asked for by a handler: the source lost the
// lease on it (an AMQP channel closed, a consumer cancelled by the server), so it is
// dropped without any acknowledgement and the queue delivers it again.
enum class Outcome { none, ack, retry, release, reject, lost };
const char* to_string(Outcome outcome);

struct MessageState;

// Receives each message's single settlement (the container core).
class Settler {
 public:
  virtual ~Settler() = default;
  virtual void settle(const std::shared_ptr<MessageState>& state, Outcome outcome,
                      std::string reason) = 0;
};

// Names and values packed in one string: one allocation per message instead of a
// map node and up to two strings per entry (with a std::map, a held SQS message's four
// system attributes cost more than its 300-byte body). Lengths are varints and the
// names SQS and AMQP always send are one byte.
class PackedPairs {
 public:
  // Sized once for the pairs to come (no growth slack), then add() each.
  void reserve_for(std::size_t pairs, std::size_t text_bytes) {
    data_.reserve(pairs * 4 + text_bytes);
  }
  void add(std::string_view name, std::string_view value);
  // The first value under `name`.
  std::optional<std::string_view> find(std::string_view name) const;
  template <class F>
  void for_each(F&& f) const {  // f(name, value), in the order added
    for (std::size_t at = 0; at < data_.size();) {
      const auto name = next_name(at);
      const auto value = next_text(at);
      f(name, value);
    }
  }
  bool empty() const { return data_.empty(); }
  std::map<std::string, std::string> to_map() const;  // the first value of each name

 private:
  std::string_view next_name(std::size_t& at) const;
  std::string_view next_text(std::size_t& at) const;
  void append_text(std::string_view text);
  std::string data_;
};

struct MessageState : std::enable_shared_from_this<MessageState> {
  std::string id;
  std::string body;
  std::shared_ptr<const std::string> source;  // one string per queue, not per message
  std::string receipt;                        // SQS receipt handle / AMQP delivery tag
  PackedPairs attributes;
  PackedPairs headers;
  // What Message::attributes() and headers() return, built on the first call.
  struct Maps {
    std::map<std::string, std::string> attributes, headers;
  };
  std::once_flag maps_once;
  std::unique_ptr<const Maps> maps;
  int receive_count = 1;
  std::optional<std::string> group_id;  // set: the message belongs to an ordered group
  std::chrono::system_clock::time_point received_at;
  // What the message is held under (an AMQP channel, say); the source reports a lost
  // lease by this number. 0: a source whose leases are never lost as a whole.
  std::uint64_t lease = 0;

  // Set by a source that could not make the message ready for a handler (its
  // payload could not be fetched): the core settles it so, without a handler.
  struct Problem {
    bool retry = false;  // false: reject
    std::string reason;  // "payload_missing", ...
    std::string detail;
  };
  std::unique_ptr<Problem> problem;  // rare: a pointer, not an optional
  // A payload the source fetched in place of the body (an S3 pointer): the body as
  // the queue holds it, and what is held as long as the message is (the payload's byte
  // reservation). Rare: behind a pointer.
  struct Fetched {
    std::string queue_body;
    std::shared_ptr<void> resources;
  };
  std::unique_ptr<Fetched> fetched;
  Fetched& fetched_payload() {
    if (!fetched) fetched = std::make_unique<Fetched>();
    return *fetched;
  }
  const std::string& queue_body() const {
    static const std::string none;
    return fetched ? fetched->queue_body : none;
  }

  std::weak_ptr<Settler> owner;
  std::atomic<Outcome> outcome{Outcome::none};
  std::atomic<bool> started{false};  // a handler has it
  // When the lease runs out unless extended (steady clock, ms); extendable sources.
  std::atomic<std::int64_t> visible_until_ms{0};

  // True for the one caller that settles it.
  bool settle(Outcome o, std::string reason = {});
  bool settled() const { return outcome.load() != Outcome::none; }
};

std::int64_t steady_now_ms();

// Builds the public handle around a state (sluice::Message's constructor is private).
struct MessageAccess {
  static Message wrap(std::shared_ptr<MessageState> state) { return Message(std::move(state)); }
};

}  // namespace sluice::detail
