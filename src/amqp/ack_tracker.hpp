#pragma once
// The settled deliveries of one channel, turned into as few basic.ack frames as
// the protocol allows. Delivery tags are per channel and consecutive (one consumer
// per channel); handlers finish out of order. basic.ack with multiple=true over
// tag T acknowledges every outstanding delivery up to T, so it may only cover the
// contiguous prefix of settled tags: one slow message must not be acked by its
// neighbours' frame. Acks beyond a gap go one by one, when asked (after a short
// wait, or when permits are short). Pure logic, one thread.
//
// Each open delivery keeps when it came and its message id: a broker that closes the
// channel for a delivery held past its consumer_timeout is answered with which one.

#include <chrono>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

namespace sluice::amqp {

class AckTracker {
 public:
  enum class State : std::uint8_t { open, ack_pending, done };
  using Clock = std::chrono::steady_clock;

  // A new delivery (tags increase; a skipped tag is taken as settled elsewhere).
  void delivered(std::uint64_t tag, Clock::time_point at = {}, std::string id = {}) {
    if (tag <= floor_ + entries_.size()) return;  // not newer than what we know
    while (floor_ + entries_.size() + 1 < tag) entries_.push_back({State::done, {}, {}});
    entries_.push_back({State::open, at, std::move(id)});
    ++outstanding_;
  }

  struct Held {
    std::uint64_t tag = 0;
    Clock::time_point since{};
    std::string id;
  };
  // Deliveries not acknowledged to the broker that came before `before`, oldest first.
  std::vector<Held> held_since(Clock::time_point before) const {
    std::vector<Held> out;
    for (std::size_t i = 0; i < entries_.size(); ++i)
      if (entries_[i].state != State::done && entries_[i].at < before)
        out.push_back({floor_ + i + 1, entries_[i].at, entries_[i].id});
    return out;
  }
  // Acked by its handler: to be acknowledged by the next frame that may cover it.
  // False when the tag is not an open delivery of this channel (nothing to send).
  bool acked(std::uint64_t tag) { return set(tag, State::ack_pending); }
  // Nacked or rejected by a frame of its own (already sent): never covered again.
  bool finished(std::uint64_t tag) {
    if (!set(tag, State::done)) return false;
    --outstanding_;
    return true;
  }

  struct Frames {
    std::uint64_t multiple_up_to = 0;    // basic.ack(tag, multiple=true); 0: none
    std::vector<std::uint64_t> singles;  // basic.ack(tag, multiple=false)
    std::size_t acks = 0;                // deliveries acknowledged by these frames
  };
  // The frames to send now; `singles` also for acks waiting behind an open delivery.
  Frames take(bool singles) {
    Frames frames;
    while (!entries_.empty() && entries_.front().state != State::open) {
      ++floor_;
      if (entries_.front().state == State::ack_pending) {
        frames.multiple_up_to = floor_;
        ++frames.acks;
        --outstanding_;
      }
      entries_.pop_front();
    }
    waiting_ = 0;
    for (std::size_t i = 0; i < entries_.size(); ++i) {
      if (entries_[i].state != State::ack_pending) continue;
      if (singles) {
        frames.singles.push_back(floor_ + i + 1);
        entries_[i].state = State::done;
        ++frames.acks;
        --outstanding_;
      } else {
        ++waiting_;
      }
    }
    return frames;
  }
  // Acks held back behind an open delivery after the latest take().
  std::size_t waiting() const { return waiting_; }
  // Deliveries not yet acknowledged to the broker (open or pending).
  std::size_t outstanding() const { return outstanding_; }
  bool empty() const { return outstanding() == 0; }
  // Acked by handlers, not yet sent.
  std::size_t ack_pending() const {
    std::size_t n = 0;
    for (const auto& e : entries_) n += e.state == State::ack_pending;
    return n;
  }

 private:
  bool set(std::uint64_t tag, State state) {
    if (tag <= floor_ || tag > floor_ + entries_.size()) return false;  // unknown or settled
    auto& entry = entries_[tag - floor_ - 1];
    if (entry.state != State::open) return false;
    entry.state = state;
    if (state == State::done) entry.id.clear();
    return true;
  }
  struct Entry {
    State state;
    Clock::time_point at;  // delivered
    std::string id;        // the message's
  };
  std::uint64_t floor_ = 0;    // every tag up to here is acknowledged or finished
  std::deque<Entry> entries_;  // tags floor_+1, floor_+2, ...
  std::size_t waiting_ = 0;
  std::size_t outstanding_ = 0;  // open or ack_pending
};

}  // namespace sluice::amqp
