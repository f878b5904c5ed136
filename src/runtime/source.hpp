#pragma once
// What the container core needs from a queue. Pull sources (SQS) and push sources
// (AMQP, with prefetch) both deliver through receive(max): the core never asks for
// more messages than it holds permits for.

#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "runtime/message_state.hpp"

namespace sluice::runtime {

using StatePtr = std::shared_ptr<detail::MessageState>;

struct SourceEvents {
  std::function<void(std::size_t)> acked;           // deletes confirmed
  std::function<void(const std::string&)> warning;  // something to log
};

class Source {
 public:
  virtual ~Source() = default;
  // Up to `max` messages; cancellable (throws aws::AwsError{cancelled}).
  virtual boost::asio::awaitable<std::vector<StatePtr>> receive(int max) = 0;
  // Batched; thread-safe.
  virtual void ack(const StatePtr& state) = 0;
  virtual void change_visibility(const StatePtr& state, std::chrono::seconds visibility) = 0;
  // Heartbeat: extend these messages' visibility now (not batched behind a timer).
  virtual boost::asio::awaitable<std::size_t> extend(std::vector<StatePtr> states,
                                                     std::chrono::seconds visibility) = 0;
  virtual bool has_dead_letter() const = 0;
  // Sends the message with its reason to the dead-letter destination.
  virtual boost::asio::awaitable<void> dead_letter(StatePtr state, std::string reason) = 0;
  virtual bool fifo() const = 0;
  virtual void start() = 0;
  // Sends every pending delete and visibility change and waits for them.
  virtual boost::asio::awaitable<void> flush() = 0;
  virtual std::string describe() const = 0;
};

}  // namespace sluice::runtime
