#pragma once
// The shared state behind a sluice::Message; internal to the runtime.

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>

namespace sluice::detail {

enum class Outcome { none, ack, nack, release, reject };
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
  std::optional<std::string> group_id;
  std::chrono::system_clock::time_point received_at;

  std::weak_ptr<Settler> owner;
  std::atomic<Outcome> outcome{Outcome::none};
  std::atomic<bool> started{false};  // a handler has it
  // When the queue will make it visible again unless extended (steady clock, ms).
  std::atomic<std::int64_t> visible_until_ms{0};

  // True for the one caller that settles it.
  bool settle(Outcome o, std::string reason = {});
};

std::int64_t steady_now_ms();

}  // namespace sluice::detail
