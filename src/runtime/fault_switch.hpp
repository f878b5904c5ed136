#pragma once
// Deliberately broken cores, for proving that the deterministic simulation (tests/sim)
// catches what it claims to: each switch turns one guarantee of the core off. They exist
// only in the simulation's own build of the core (SLUICE_FAULT_SWITCHES); in every other
// build SLUICE_FAULT(name) is the constant false and the compiler drops the branch.
#ifdef SLUICE_FAULT_SWITCHES
#include <atomic>

namespace sluice::runtime::faults {
enum class Switch {
  none,
  ack_before_commit,       // manual acks: the message is acked when its handler returns
  permit_released_twice,   // a settled message gives its permit back twice
  group_out_of_order,      // an ordered group's next run starts with its last waiting message
  position_ahead_of_rows,  // a saved position passes items not yet settled
};
extern std::atomic<Switch> active;
}  // namespace sluice::runtime::faults

#define SLUICE_FAULT(name)                                              \
  (::sluice::runtime::faults::active.load(std::memory_order_relaxed) == \
   ::sluice::runtime::faults::Switch::name)
#else
#define SLUICE_FAULT(name) false
#endif
