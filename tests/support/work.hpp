#pragma once
// A handler's stand-in for real work (a database call, a computation, a stuck call):
// the sleep *is* the behaviour under test. No assertion may depend on how long it took
// on the wall clock; a test that waits for something waits on an event (wait.hpp).
#include <chrono>
#include <thread>

namespace sluice::test {

template <typename Rep, typename Period>
void work_for(std::chrono::duration<Rep, Period> how_long) {
  std::this_thread::sleep_for(how_long);
}

}  // namespace sluice::test

namespace sluice::test {

// A fault kept in place for a while (a broker blocked, stopped): its length is the
// behaviour under test (longer than a timeout the code must outlast); assertions wait
// on events, never on this having taken so long.
template <typename Rep, typename Period>
void hold_fault_for(std::chrono::duration<Rep, Period> how_long) {
  std::this_thread::sleep_for(how_long);
}

}  // namespace sluice::test
