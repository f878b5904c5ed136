#pragma once
// The stage between the receive loops and the workers: which held messages may be
// handed to a handler now. Composed from the source's capabilities, never from
// `if (fifo)` branches in the loops:
//   - direct: every message at once (one unit per message, or one per receive in
//     batch mode);
//   - ordered groups: messages that carry a group id go out one at a time per group,
//     the next only once the previous one is *settled* (acked, rejected, retried,
//     released or lost), never when its handler returns; groups run in parallel. A
//     group whose message is retried, released or lost has the rest of its held
//     messages released, in order, so that the queue delivers them again after it.
//     With runs (ContainerOptions::ordered_group_runs: a batch handler that keeps a
//     group's order itself): a group's messages admitted together go out together, in
//     order, in one unit; the group's next run once every message of this one is
//     settled. One of a run retried, released or lost releases the rest of the run
//     too, though they are out: their handler's later acks are then ignored.
// Pure logic, thread-safe; the core acts on the steps it returns.

#include <boost/container/small_vector.hpp>
#include <memory>
#include <vector>

#include "runtime/message_state.hpp"

namespace sluice::runtime {

using StatePtr = std::shared_ptr<detail::MessageState>;
// What one handler call gets: one message (single listener) or several (batch). One
// is kept inline: a single listener's unit costs no allocation of its own.
using Unit = boost::container::small_vector<StatePtr, 1>;

class Dispatch {
 public:
  struct Step {
    std::vector<Unit> ready;        // hand these to the workers
    std::vector<StatePtr> release;  // give these back to the queue
  };
  virtual ~Dispatch() = default;
  // A receive's messages, in the order the queue gave them.
  virtual Step admit(std::vector<StatePtr> states) = 0;
  // A message's final settlement.
  virtual Step settled(const StatePtr& state, detail::Outcome outcome) = 0;
};

std::unique_ptr<Dispatch> make_direct_dispatch(bool batch);
std::unique_ptr<Dispatch> make_ordered_groups(bool batch, bool runs);

}  // namespace sluice::runtime
