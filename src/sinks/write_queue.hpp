#pragma once
// The sink writers' queue, and the order it keeps: the pipeline's ordered stage.
// Items leave in the order they were queued. The records of an ordered group (an SQS
// FIFO message group, a single-active-consumer queue) go to one writer at a time, which
// holds the group until its batch is settled (release): so a group's rows reach the
// database in its order, while other groups and unordered records go to any writer.
// Several records of one group share a batch only when the writer's batches are all or
// nothing (a record failed on its own must not have a later one of its group written
// beside it). Not thread-safe: the writers call it under their own lock.
#include <algorithm>
#include <cstddef>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace sluice::sinks {

template <typename Item>
class OrderedWriteQueue {
 public:
  using GroupOf = std::function<std::optional<std::string>(const Item&)>;
  explicit OrderedWriteQueue(GroupOf group_of) : group_of_(std::move(group_of)) {}

  // Queues `items` in order. True when a writer should wake: a batch can start (its
  // timer begins), a batch became full, or an ordered record waits (it is written
  // without waiting for company); waking on every record would cost a context switch
  // per message.
  bool push(std::vector<Item> items, std::size_t batch_size) {
    const std::size_t before = queue_.size();
    for (auto& item : items) {
      std::optional<std::string> group = group_of_(item);
      ordered_ += group.has_value();
      queue_.push_back({std::move(item), std::move(group)});
    }
    return before == 0 || ordered_ > 0 || queue_.size() / batch_size > before / batch_size;
  }

  std::size_t size() const { return queue_.size(); }
  bool empty() const { return queue_.empty(); }
  // An ordered group's record waits: its group advances only when it is settled, so a
  // writer takes it at once instead of waiting to fill a batch.
  bool has_ordered() const { return ordered_ > 0; }

  // Up to `max` items in queue order for `writer`, leaving out (queued, in order) the
  // records of groups another writer holds; `claimed` gets the groups this batch now
  // holds, to be released once the batch is settled. Empty when everything queued is
  // of groups other writers hold.
  std::vector<Item> take(const void* writer, bool whole_batches, std::size_t max,
                         std::vector<std::string>& claimed) {
    std::vector<Item> batch;
    if (ordered_ == 0) {  // nothing to keep in order: the front of the queue
      const std::size_t n = std::min(max, queue_.size());
      batch.reserve(n);
      for (std::size_t i = 0; i < n; ++i) {
        batch.push_back(std::move(queue_.front().item));
        queue_.pop_front();
      }
      return batch;
    }
    std::deque<Queued> left;
    while (!queue_.empty() && batch.size() < max) {
      Queued queued = std::move(queue_.front());
      queue_.pop_front();
      if (queued.group) {
        const auto [holder, added] = holders_.try_emplace(*queued.group, writer);
        if (holder->second != writer || (!added && !whole_batches)) {
          left.push_back(std::move(queued));
          continue;
        }
        if (added) claimed.push_back(*queued.group);
        --ordered_;
      }
      batch.push_back(std::move(queued.item));
    }
    for (auto it = left.rbegin(); it != left.rend(); ++it) queue_.push_front(std::move(*it));
    return batch;
  }

  // The batch that claimed these groups is settled: their next records may go to any
  // writer.
  void release(const std::vector<std::string>& groups) {
    for (const auto& group : groups) holders_.erase(group);
  }

 private:
  struct Queued {
    Item item;
    std::optional<std::string> group;
  };
  GroupOf group_of_;
  std::deque<Queued> queue_;
  std::size_t ordered_ = 0;                               // queued records of ordered groups
  std::unordered_map<std::string, const void*> holders_;  // group -> the writer holding it
};

}  // namespace sluice::sinks
