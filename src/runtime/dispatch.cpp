#include "runtime/dispatch.hpp"

#include <deque>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

namespace sluice::runtime {
namespace {

using detail::Outcome;

std::vector<Unit> pack(std::vector<StatePtr> states, bool batch) {
  std::vector<Unit> units;
  if (states.empty()) return units;
  if (batch) {
    units.emplace_back(std::make_move_iterator(states.begin()),
                       std::make_move_iterator(states.end()));
    return units;
  }
  units.reserve(states.size());
  for (auto& s : states) units.push_back(Unit{std::move(s)});
  return units;
}

class DirectDispatch final : public Dispatch {
 public:
  explicit DirectDispatch(bool batch) : batch_(batch) {}
  Step admit(std::vector<StatePtr> states) override {
    return {pack(std::move(states), batch_), {}};
  }
  Step settled(const StatePtr&, Outcome) override { return {}; }

 private:
  bool batch_;
};

class OrderedGroups final : public Dispatch {
 public:
  explicit OrderedGroups(bool batch) : batch_(batch) {}

  Step admit(std::vector<StatePtr> states) override {
    std::vector<StatePtr> out;
    std::lock_guard lock(mutex_);
    for (auto& s : states) {
      if (s->settled()) continue;  // lost before it was admitted: nothing to hand out
      const auto group_id = s->text.group();
      if (!group_id) {  // not in a group: no order to keep
        out.push_back(std::move(s));
        continue;
      }
      auto it = groups_.find(*group_id);
      if (it == groups_.end()) it = groups_.emplace(std::string(*group_id), Group{}).first;
      Group& group = it->second;
      group.queue.push_back(s);
      if (!group.out) {
        group.out = true;
        out.push_back(std::move(s));
      }
    }
    return {pack(std::move(out), batch_), {}};
  }

  Step settled(const StatePtr& state, Outcome outcome) override {
    const auto group_id = state->text.group();
    if (!group_id) return {};
    std::lock_guard lock(mutex_);
    auto it = groups_.find(*group_id);
    // Not the message out for its group (one settled while it waited, by a lost
    // lease or by stop()): it is skipped when its turn comes.
    if (it == groups_.end() || !it->second.out || it->second.queue.front() != state) return {};
    Group& group = it->second;
    group.queue.pop_front();
    group.out = false;
    Step step;
    if (outcome == Outcome::ack || outcome == Outcome::reject) {
      while (!group.queue.empty() && group.queue.front()->settled()) group.queue.pop_front();
      if (!group.queue.empty()) {
        group.out = true;
        step.ready = pack({group.queue.front()}, batch_);
        return step;
      }
    } else {
      // Retried, released or lost: what follows it must not overtake it.
      for (auto& s : group.queue) {
        // Messages of the same lost lease are dropped by the core, never released.
        const bool same_lost_lease = outcome == Outcome::lost && s->lease == state->lease;
        if (!s->settled() && !same_lost_lease) step.release.push_back(s);
      }
    }
    groups_.erase(it);
    return step;
  }

 private:
  struct Group {
    std::deque<StatePtr> queue;  // front() is the one out, when `out`
    bool out = false;
  };
  const bool batch_;
  std::mutex mutex_;
  struct NameHash {  // finds a group by the string_view in the message's text
    using is_transparent = void;
    std::size_t operator()(std::string_view name) const {
      return std::hash<std::string_view>{}(name);
    }
  };
  std::unordered_map<std::string, Group, NameHash, std::equal_to<>> groups_;
};

}  // namespace

std::unique_ptr<Dispatch> make_direct_dispatch(bool batch) {
  return std::make_unique<DirectDispatch>(batch);
}
std::unique_ptr<Dispatch> make_ordered_groups(bool batch) {
  return std::make_unique<OrderedGroups>(batch);
}

}  // namespace sluice::runtime
