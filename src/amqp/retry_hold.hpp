#pragma once
// What the RabbitMQ source keeps about failed deliveries, on the connection thread:
//   - the attempt log: receive counts of messages that failed here, by message id, for
//     classic queues (which count no deliveries); the oldest forgotten first;
//   - held retries: a failed delivery is held for its backoff (RabbitMQ has no delayed
//     requeue) and returned (basic.reject with requeue) when it is due.
#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <queue>
#include <string>
#include <unordered_map>
#include <vector>

namespace sluice::amqp {

class AttemptLog {
 public:
  int get(const std::string& id) const {
    auto it = counts_.find(id);
    return it == counts_.end() ? 0 : it->second;
  }
  void failed(const std::string& id, int receive_count) {
    auto [it, inserted] = counts_.try_emplace(id, receive_count);
    if (!inserted) {
      it->second = std::max(it->second, receive_count);
      return;
    }
    order_.push_back(id);
    while (order_.size() > kCapacity) {
      counts_.erase(order_.front());
      order_.pop_front();
    }
  }
  void done(const std::string& id) { counts_.erase(id); }  // its entry in order_ ages out

 private:
  static constexpr std::size_t kCapacity = 100000;
  std::unordered_map<std::string, int> counts_;
  std::deque<std::string> order_;
};

class HeldRetries {
 public:
  using Clock = std::chrono::steady_clock;
  struct Retry {
    Clock::time_point due;
    std::uint64_t lease;
    std::uint64_t tag;
    bool operator>(const Retry& o) const { return due > o.due; }
  };
  void hold(Retry retry) { queue_.push(retry); }
  bool empty() const { return queue_.empty(); }
  Clock::time_point next_due() const { return queue_.top().due; }
  // The earliest one if it is due (or `all`), removed.
  std::optional<Retry> take_due(Clock::time_point now, bool all) {
    if (queue_.empty() || (!all && queue_.top().due > now)) return std::nullopt;
    Retry r = queue_.top();
    queue_.pop();
    return r;
  }
  void clear() { queue_ = {}; }

 private:
  std::priority_queue<Retry, std::vector<Retry>, std::greater<>> queue_;
};

}  // namespace sluice::amqp
