#pragma once
// What the parts of the listener container share (runtime/container.cpp composes
// them):
//
//   intake       opens the source, runs the receive loops and scales them
//   worker stage hands units to the workers (or runs them inline) and calls handlers
//   settlement   holds every received message until it is settled: permits, the held
//                set, acks and rejects handed to the source
//   heartbeat    extends the leases of held messages
//
// Threads: one I/O thread runs every coroutine (receive loops, opening, rejects,
// heartbeat, the stop sequence); handlers run on the workers' threads. Each part
// says which of its state belongs to which thread; shared state is atomic or
// guarded by the mutex named beside it.
#include <atomic>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdint>
#include <memory>

#include "common/mutex.hpp"
#include "runtime/clock.hpp"
#include "runtime/dispatch.hpp"
#include "runtime/message_trace.hpp"
#include "runtime/source.hpp"
#include "sluice/container.hpp"

namespace sluice::runtime {

struct LatencyAverage {
  std::atomic<std::uint64_t> count{0};
  std::atomic<std::uint64_t> total_ns{0};
  void add(std::chrono::nanoseconds d) {
    count.fetch_add(1, std::memory_order_relaxed);
    total_ns.fetch_add(static_cast<std::uint64_t>(d.count()), std::memory_order_relaxed);
  }
  double average_ms() const {
    const auto n = count.load();
    return n ? static_cast<double>(total_ns.load()) / static_cast<double>(n) / 1e6 : 0.0;
  }
};

// Every figure of ContainerStats that the parts count; any thread.
struct CoreCounters {
  std::atomic<std::uint64_t> received{0}, acked{0}, failed{0}, released{0}, lost{0}, rejected{0},
      dead_lettered{0}, empty_receives{0}, receive_errors{0}, visibility_extensions{0},
      handler_calls{0}, failed_acks{0}, handoffs{0}, handoffs_shared{0};
  std::atomic<std::int64_t> pending_acks{0};
  std::atomic<std::int64_t> lease_remaining_min_ms{kNoLeaseDue};  // at the latest heartbeat round
  std::atomic<std::int64_t> in_flight{0}, in_flight_peak{0};
  LatencyAverage poll_latency, handler_latency;
};

inline void raise_peak(std::atomic<std::int64_t>& peak, std::int64_t value) {
  auto seen = peak.load();
  while (value > seen && !peak.compare_exchange_weak(seen, value)) {
  }
}

struct Core {
  explicit Core(ContainerOptions o) : options(std::move(o)) {}

  // Set before start(); afterwards only the receive range changes (Container's
  // set_concurrent_receives, on the I/O thread, under the container's options mutex).
  ContainerOptions options;
  std::shared_ptr<ContainerObserver> observer;  // set before start()
  std::unique_ptr<ContainerTracing> tracing;    // set before start(); null: not traced
  std::shared_ptr<PositionStore> positions;     // set before start(); may be null
  boost::asio::io_context io;
  // Made by start() before the I/O thread runs; what it can do is known once it is
  // open (set on the I/O thread before the first receive loop starts, and seen by the
  // workers through the hand-off of the messages it received).
  std::unique_ptr<Source> source;
  SourceCapabilities capabilities;
  std::unique_ptr<Dispatch> dispatch;
  // Keeps the container alive for work that may outlive a call (a reject's
  // completion, a posted hand-over).
  std::weak_ptr<void> owner;

  // The stop's phases, in order; each set once, by the stop.
  std::atomic<bool> intake_closed{false};  // no more receives
  std::atomic<bool> draining{false};       // units not started are released, not handled
  std::atomic<bool> stopping{false};       // the stop waits: the last one out tells it
  // Container::pause(): the receive loops end and none starts until resume() (set by
  // the caller's thread, acted on by the I/O thread).
  std::atomic<bool> paused{false};
  // Set before start() by the deterministic simulation (runtime/simulated_container.hpp):
  // the workers are coroutines on `io`, which the simulation polls on one thread.
  bool simulated = false;

  CoreCounters counters;
};

}  // namespace sluice::runtime
