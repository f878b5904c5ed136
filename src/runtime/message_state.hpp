#pragma once
// The shared state behind a sluice::Message; internal to the runtime and its sources.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

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

struct MessageState : std::enable_shared_from_this<MessageState> {
  std::string id;
  std::string body;
  std::string source;
  std::string receipt;  // SQS receipt handle / AMQP delivery tag
  std::map<std::string, std::string> attributes;
  std::map<std::string, std::string> headers;
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
  std::optional<Problem> problem;
  // The body as the queue holds it, when the source replaced it (an S3 pointer).
  std::string queue_body;
  // Held as long as the message is (the byte reservation of a fetched payload).
  std::shared_ptr<void> resources;

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
