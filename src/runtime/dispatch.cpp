#include "runtime/dispatch.hpp"

#include <algorithm>
#include <deque>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "runtime/fault_switch.hpp"

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
  OrderedGroups(bool batch, bool runs) : batch_(batch), runs_(runs) {}

  Step admit(std::vector<StatePtr> states) override {
    std::vector<StatePtr> out;
    std::lock_guard lock(mutex_);
    ++admission_;
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
      // A group with nothing out starts a run; with runs, the rest of this receive's
      // messages of the group join it (they follow it in the queue's order).
      const bool joins_run =
          runs_ && group.run == admission_ && group.out + 1 == group.queue.size();
      if (group.out == 0 || joins_run) {
        ++group.out;
        group.run = admission_;
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
    if (it == groups_.end()) return {};
    Group& group = it->second;
    const auto out_end = group.queue.begin() + static_cast<std::ptrdiff_t>(group.out);
    const auto position = std::find(group.queue.begin(), out_end, state);
    // Not out for its group (settled while it waited, by a lost lease or by stop(),
    // or released after a failure before it): it is skipped when its turn comes.
    if (position == out_end) return {};
    Step step;
    if (outcome == Outcome::ack || outcome == Outcome::reject) {
      group.queue.erase(position);
      --group.out;
    } else {
      // Retried, released or lost: what follows it must not overtake it, whether it
      // waits here or is out in the same run (its later ack is then ignored).
      for (auto s = position + 1; s != group.queue.end(); ++s) {
        // Messages of the same lost lease are dropped by the core, never released.
        const bool same_lost_lease = outcome == Outcome::lost && (*s)->lease == state->lease;
        if (!(*s)->settled() && !same_lost_lease) step.release.push_back(*s);
      }
      group.out = static_cast<std::size_t>(position - group.queue.begin());
      group.queue.erase(position, group.queue.end());
    }
    if (group.out > 0) return step;  // the run is not over yet
    std::erase_if(group.queue, [](const StatePtr& s) { return s->settled(); });
    if (group.queue.empty()) {
      groups_.erase(it);
      return step;
    }
    // The group's next run: its first waiting message, or with runs all of them.
    if (SLUICE_FAULT(group_out_of_order))  // its last waiting message first
      std::rotate(group.queue.begin(), group.queue.end() - 1, group.queue.end());
    group.out = runs_ ? group.queue.size() : 1;
    group.run = 0;  // a later receive's messages wait for this run
    const auto run_end = group.queue.begin() + static_cast<std::ptrdiff_t>(group.out);
    step.ready = pack(std::vector<StatePtr>(group.queue.begin(), run_end), batch_);
    return step;
  }

 private:
  struct Group {
    std::deque<StatePtr> queue;  // the first `out` are out (handed to a handler)
    std::size_t out = 0;
    std::uint64_t run = 0;  // the admission that started the run out, if it did
  };
  const bool batch_;
  const bool runs_;
  std::mutex mutex_;
  std::uint64_t admission_ = 0;
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
std::unique_ptr<Dispatch> make_ordered_groups(bool batch, bool runs) {
  return std::make_unique<OrderedGroups>(batch, runs);
}

}  // namespace sluice::runtime
