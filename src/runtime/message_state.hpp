#pragma once
// The shared state behind a sluice::Message; internal to the runtime and its sources.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "sluice/message.hpp"

namespace sluice::spi {
class BatchPositions;  // sluice/spi/source.hpp
}

namespace sluice::detail {

struct MessageTrace;  // runtime/message_trace.hpp

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

// Names and values packed in one string (a std::map costs a node and up to two
// strings per entry: a held SQS message's four system attributes cost more than its
// 300-byte body). Lengths are varints and the names SQS and AMQP always send are one
// byte. A view: the bytes live in a MessageText.
class PackedPairs {
 public:
  PackedPairs() = default;
  explicit PackedPairs(std::string_view data) : data_(data) {}
  // Appends one pair, encoded so, to `to`.
  static void append(std::string& to, std::string_view name, std::string_view value);
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
  std::string_view data_;
};

// All the text of a held message but its body, in one allocation of exactly its size:
// the id, the receipt (SQS receipt handle, AMQP delivery tag), the ordered group, the
// attributes and the headers. (A string each cost a 32-byte object and a heap block
// each; this costs a pointer.) Made by a Builder, read-only afterwards.
class MessageText {
 public:
  MessageText() = default;
  std::string_view id() const { return part(0); }
  std::string_view receipt() const { return part(1); }
  // Set: the message belongs to an ordered group.
  std::optional<std::string_view> group() const;
  PackedPairs attributes() const { return PackedPairs(part(3)); }
  PackedPairs headers() const { return PackedPairs(part(4)); }

  // Collects the parts, in any order; kept from message to message, its buffers keep
  // their capacity (no allocation but the text's own once warm).
  class Builder {
   public:
    Builder& id(std::string_view id);
    Builder& receipt(std::string_view receipt);
    Builder& group(std::string_view group);
    Builder& attribute(std::string_view name, std::string_view value);
    Builder& header(std::string_view name, std::string_view value);
    // The text; the builder is empty afterwards, also when this throws.
    MessageText build();
    void clear();  // drops what was collected (a message abandoned half-way)

   private:
    std::string id_, receipt_, group_, attributes_, headers_;
    bool grouped_ = false;
  };

 private:
  // Five varint lengths (the group's plus one, 0: no group), then the five parts.
  std::string_view part(int index) const;
  std::unique_ptr<char[]> data_;
};

// Where a message came from and who settles it: the same for all the messages of a
// container, shared by them.
struct Origin {
  std::string source;  // what Message::source() says (the queue's URL or address)
  std::weak_ptr<Settler> settler;
  // A log-reading source's positions, for the writers (spi::BatchPositions); or null.
  std::shared_ptr<spi::BatchPositions> positions;
};

struct MessageState {
  MessageText text;  // id, receipt, group, attributes, headers
  std::string body;
  std::shared_ptr<const Origin> origin;  // set by the core when it takes the message
  std::chrono::system_clock::time_point received_at;
  // What the message is held under (an AMQP channel, say); the source reports a lost
  // lease by this number. 0: a source whose leases are never lost as a whole.
  std::uint64_t lease = 0;
  // When the lease runs out unless extended (steady clock, ms); extendable sources.
  std::atomic<std::int64_t> visible_until_ms{0};
  int receive_count = 1;
  std::uint32_t held_slot = 0;  // its place in the core's held set (under its lock)
  std::atomic<Outcome> outcome{Outcome::none};
  std::atomic<bool> started{false};  // a handler has it
  // Its trace context and process span, when the container traces (set on the I/O
  // thread when it is received, before any other thread sees the message).
  std::unique_ptr<MessageTrace> trace;

  MessageState();  // out of line: MessageTrace is complete only there
  MessageState(const MessageState&) = delete;
  MessageState& operator=(const MessageState&) = delete;
  ~MessageState();

  // Set by a source that could not make the message ready for a handler (its
  // payload could not be fetched): the core settles it so, without a handler.
  struct Problem {
    bool retry = false;  // false: reject
    std::string reason;  // "payload_missing", ...
    std::string detail;
  };
  const Problem* problem() const;
  void set_problem(Problem problem);
  // A payload the source fetched in place of the body (an S3 pointer): the body as
  // the queue holds it, and what is held as long as the message is (the payload's byte
  // reservation).
  struct Fetched {
    std::string queue_body;
    std::shared_ptr<void> resources;
  };
  Fetched& fetched_payload();
  const std::string& queue_body() const;  // empty: nothing was fetched
  // What Message::attributes() and headers() return, built on the first call.
  struct Maps {
    std::map<std::string, std::string> attributes, headers;
  };
  const Maps& built_maps();

  bool settled() const { return outcome.load() != Outcome::none; }

 private:
  // What few messages need, made on first use: a state is 16 bytes smaller for it.
  struct Rare;
  Rare& rare();
  std::atomic<Rare*> rare_{nullptr};
};

// True for the one caller that settles `state`, which then goes to its owner.
bool settle_once(const std::shared_ptr<MessageState>& state, Outcome outcome,
                 std::string reason = {});

std::int64_t steady_now_ms();

// Builds the public handle around a state (sluice::Message's constructor is private).
struct MessageAccess {
  static Message wrap(std::shared_ptr<MessageState> state) { return Message(std::move(state)); }
  static const std::shared_ptr<MessageState>& state(const Message& message) {
    return message.state_;
  }
};

}  // namespace sluice::detail
