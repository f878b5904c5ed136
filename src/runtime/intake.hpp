#pragma once
// Intake: opens the source (trying again while it fails), then runs the receive
// loops. A loop takes permits, receives up to that many messages, has settlement hold
// them, lets the dispatch say which are ready and gives those to the worker stage.
// The loops scale between a minimum and a maximum (runtime/receive_scaler.hpp) or,
// with `concurrency: auto`, by measured throughput (runtime/auto_concurrency.hpp).
//
// Threads: everything here runs on the I/O thread, but for the figures read by
// stats() (atomic).
#include <atomic>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include "runtime/clock.hpp"
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "runtime/async_wait.hpp"
#include "runtime/auto_concurrency.hpp"
#include "runtime/core.hpp"
#include "runtime/receive_scaler.hpp"
#include "runtime/token_bucket.hpp"

namespace sluice::runtime {

class Settlement;
class WorkerStage;

class Intake {
 public:
  Intake(Core& core, Settlement& settlement, WorkerStage& workers);

  // Opens the source; once it is, calls `compose` (which builds the stages from
  // what the source can do) and starts the receive loops. On the I/O thread.
  void start(std::function<void()> compose);
  // The receive range while running (Container::set_concurrent_receives).
  void set_range(int min, int max);
  int active() const { return active_.load(); }
  int peak() const { return static_cast<int>(peak_.load()); }
  int min_receives() const { return scaler_.config().min_receives; }
  int max_receives() const { return scaler_.config().max_receives; }

  // Container::pause() (core.paused is set already): cancels the receive loops that
  // wait for permits, for the rate limit or a backoff; a loop on a receive ends when
  // the receive returns (at most the source's poll wait), after handing over what it
  // brought. resume() starts them again. On the I/O thread.
  void pause();
  void resume();

  // Stopping, on the I/O thread (core.intake_closed is set already): cancels the
  // opening and every receive (an open long poll ends at once) ...
  void close();
  // ... and waits for the loops to end.
  boost::asio::awaitable<bool> drain(CoreClock::time_point deadline);

 private:
  boost::asio::awaitable<void> open_and_run(std::function<void()> compose);
  void configure_scaling();
  void spawn_receiver();
  void receiver_gone();
  boost::asio::awaitable<void> receive_loop(int id);
  // After a failure: waits, doubling `backoff` up to the maximum; false when stopping.
  boost::asio::awaitable<bool> back_off(CoreTimer& timer,
                                        std::chrono::milliseconds& backoff);

  Core& core_;
  Settlement& settlement_;
  WorkerStage& workers_;
  ReceiveScaler scaler_;
  std::optional<AutoConcurrency> auto_concurrency_;  // concurrency: auto
  int last_auto_level_ = 0;                          // its last logged level
  bool open_ = false;
  static constexpr int kOpening = -1;  // the opening's signal
  std::map<int, std::shared_ptr<boost::asio::cancellation_signal>> signals_;
  // The loops a pause may cancel: those waiting for permits, tokens or a backoff
  // (holding no message).
  std::set<int> cancellable_;
  std::optional<TokenBucket> bucket_;  // max_messages_per_second
  int next_id_ = 0;
  // The receive loops running (and the opening, while it runs); the stop waits for 0.
  std::atomic<int> active_{0};
  std::atomic<std::int64_t> peak_{0};
  AsyncCondition ended_;
};

}  // namespace sluice::runtime
