#pragma once
// How long a failed message waits before it comes back: exponential in its receive
// count, capped, with "equal jitter" (half fixed, half random) so that messages that
// failed together (a batch refused by a database) do not come back in lock-step.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>

#include "runtime/clock.hpp"

namespace sluice::runtime {

// Equal jitter: half of `full` fixed, plus a random share of the other half.
inline std::chrono::milliseconds equal_jitter(std::chrono::milliseconds full,
                                              std::uint64_t random) {
  const std::int64_t half = full.count() / 2;
  return std::chrono::milliseconds(
      half +
      static_cast<std::int64_t>(random % static_cast<std::uint64_t>(full.count() - half + 1)));
}

inline std::chrono::milliseconds failure_backoff(std::chrono::milliseconds base,
                                                 std::chrono::milliseconds max, int receive_count,
                                                 std::uint64_t random) {
  const int exponent = std::clamp(receive_count - 1, 0, 40);
  const double ms =
      std::min(static_cast<double>(base.count()) * static_cast<double>(1LL << exponent),
               static_cast<double>(max.count()));
  return equal_jitter(std::chrono::milliseconds(static_cast<std::int64_t>(ms)), random);
}

// The jitter's randomness; under a simulation's virtual clock, its seeded generator (a
// seed replays the same backoffs).
inline std::uint64_t backoff_random() {
  if (VirtualClock* simulated = clock_detail::installed.load(std::memory_order_acquire))
    return simulated->random();
  thread_local std::minstd_rand engine(std::random_device{}());
  return engine();
}

}  // namespace sluice::runtime
