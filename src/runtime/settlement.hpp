#pragma once
// Settlement: every received message is held here, with its permit, until it is
// settled exactly once; the settlement goes to the source (ack, retry, release, a
// reject to the dead-letter destination), the permit comes back (for an ack the
// source confirms, once it confirms), and the message's group may move on.
//
// Threads: settle() runs on whichever thread settled the message (a worker, the I/O
// thread, a handler's own thread); rejects run on the I/O thread.
#include <boost/asio/awaitable.hpp>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/mutex.hpp"
#include "runtime/async_wait.hpp"
#include "runtime/core.hpp"
#include "runtime/permits.hpp"

namespace sluice::runtime {

class WorkerStage;

// The messages received and not yet finished: a vector in which each message knows
// its slot, so that adding and removing one costs no allocation (a hash map's node
// was ~60 bytes a held message). Not thread-safe.
class HeldSet {
 public:
  void add(StatePtr state);
  void remove(detail::MessageState* state);
  void reserve(std::size_t n) { states_.reserve(n); }
  auto begin() const { return states_.begin(); }
  auto end() const { return states_.end(); }

 private:
  std::vector<StatePtr> states_;
};

class Settlement final : public detail::Settler {
 public:
  Settlement(Core& core, WorkerStage& workers);

  Permits& permits() { return permits_; }
  // Stopping, from any thread: no permit is handed out again (waiting receives get 0).
  void close() { permits_.close(); }
  // Every message of this container settles here (through `settler`, which keeps the
  // container alive while a settlement runs), carrying the source's positions for the
  // writers (null: none).
  void set_origin(std::string source, std::weak_ptr<detail::Settler> settler,
                  std::shared_ptr<spi::BatchPositions> positions);

  // A receive's messages, on the I/O thread: held from now on. Drops (and gives the
  // permits of) those settled before the core took them (they told no one).
  void hold(std::vector<StatePtr>& states, int permits_taken);

  void settle(const StatePtr& state, detail::Outcome outcome, std::string reason) override;
  // A handler (or the unusable path) has the message: the stop waits until it is
  // finished.
  void mark_started(const StatePtr& state);
  // The source confirmed (or gave up) acks; `from_ack` of them held permits.
  void acks_settled(std::size_t confirmed, std::size_t abandoned, std::size_t from_ack);
  // The source lost the lease on these messages (a closed channel): dropped unacked.
  void lease_lost(std::uint64_t lease);
  // The held messages whose lease runs out within `threshold_ms`; sets
  // `remaining_min_ms` to the least lease left among them (negative: one ran out
  // already; kNoLeaseDue: none is due).
  std::vector<StatePtr> due_for_extension(std::int64_t threshold_ms,
                                          std::int64_t& remaining_min_ms);

  // Stopping, on the I/O thread: waits until every started message is finished.
  boost::asio::awaitable<bool> drain_started(CoreClock::time_point deadline);
  // Gives back every held message no handler started.
  void release_unstarted();
  // Waits until every reject has reached the dead-letter destination (or failed).
  boost::asio::awaitable<bool> drain_rejects(CoreClock::time_point deadline);

 private:
  boost::asio::awaitable<void> reject(StatePtr state, std::string reason);
  void finish(const StatePtr& state, detail::Outcome outcome, const std::string& reason = {});
  std::chrono::milliseconds backoff_for(int receive_count) const;

  Core& core_;
  WorkerStage& workers_;
  Permits permits_;
  std::shared_ptr<const detail::Origin> origin_;  // every message's; set once, at start

  Mutex held_mutex_;
  HeldSet held_ SLUICE_GUARDED_BY(held_mutex_);

  std::atomic<int> started_unfinished_{0};
  std::atomic<int> pending_rejects_{0};
  // The stop waits on it for started_unfinished_ and pending_rejects_ to reach 0.
  AsyncCondition drained_;
};

}  // namespace sluice::runtime
