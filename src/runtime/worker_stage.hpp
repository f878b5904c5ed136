#pragma once
// The worker stage: units ready for a handler go through a bounded hand-off to the
// worker threads (or, for a source whose preparation never blocks and
// worker_threads 0, run inline on the I/O thread). A worker prepares the unit (the
// source completes its messages), calls the handler and settles by the ack mode.
//
// Threads: take() and the inline path run on the I/O thread; hand_over() from any
// thread; handlers on the workers (or inline).
#include <atomic>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/experimental/concurrent_channel.hpp>
#include <boost/asio/io_context.hpp>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "runtime/async_wait.hpp"
#include "runtime/clock.hpp"
#include "runtime/core.hpp"

namespace sluice::runtime {

class Settlement;

struct Handlers {
  MessageHandler single;
  BatchHandler batch;
  UnusableHandler unusable;  // optional; set before start
};

class WorkerStage {
 public:
  WorkerStage(Core& core, Settlement& settlement, Handlers handlers);
  ~WorkerStage();

  void set_unusable_handler(UnusableHandler handler) { handlers_.unusable = std::move(handler); }
  // `threads` workers; 0: handlers run inline on the I/O thread. Once, at start or
  // when the source is open.
  void start(int threads);
  bool runs_inline() const { return inline_; }
  int threads() const { return threads_; }

  // From a receive loop, on the I/O thread: runs the units (inline) or hands them to
  // the workers, suspending while the hand-off is full (backpressure). False: the stop
  // interrupted it (the rest were released).
  boost::asio::awaitable<bool> take(std::vector<Unit> units);
  // Units that became ready outside a receive loop (a group's next message), from any
  // thread.
  void hand_over(std::vector<Unit> units);

  int running() const { return running_handlers_.load(); }
  // Stopping, on the I/O thread: waits until no handler runs.
  boost::asio::awaitable<bool> drain(CoreClock::time_point deadline);
  // No more hand-offs; the workers end once they have none.
  void close();
  // Joins the worker threads (only once no handler runs).
  void join();

 private:
  // Several handler calls' worth of messages handed off together. The worker that
  // takes it claims them one by one in order; when one of its calls runs long, the
  // stage offers the same run to another worker, and each unit is still claimed once.
  struct Run {
    std::vector<Unit> units;
    std::atomic<std::size_t> next{0};              // the next unit to claim
    std::atomic<std::int64_t> call_started_ns{0};  // the latest claimed unit's start
    std::atomic<int> waiting{0};         // hand-offs of it sent and not yet taken by a worker
    std::size_t next_at_last_check = 0;  // I/O thread only
    int offers = 0;                      // I/O thread only
  };
  // One hand-off to the workers: one unit, or a run of them. A hand-off of one
  // single-listener message allocates nothing.
  struct Work {
    Unit unit;
    std::shared_ptr<Run> run;
  };
  using Handoff =
      boost::asio::experimental::concurrent_channel<void(boost::system::error_code, Work)>;

  boost::asio::awaitable<bool> send(std::vector<Unit> units);
  std::size_t units_per_handoff(std::size_t units) const;
  // On the I/O thread: runs handed off are checked every few milliseconds while any
  // has units unclaimed, and one stuck behind a long call is offered again.
  void watch(std::shared_ptr<Run> run);
  void arm_run_check();
  void offer_stuck_runs();
  void work_through(Run& run);
  boost::asio::awaitable<void> worker_loop();
  void handle_inline(std::vector<Unit>& units);
  void handle(Unit& unit);
  void prepare(Unit& unit);
  void run_single(const StatePtr& state);
  void run_batch(Unit& states);
  void settle_unusable(const StatePtr& state);
  void finish_handler(CoreClock::time_point started, bool ok);
  void settle_after_handler(const StatePtr& state, bool ok);
  static void release_unit(Unit& unit);
  void stop_pool();  // the pool's threads ended where they are, and joined

  Core& core_;
  Settlement& settlement_;
  Handlers handlers_;
  Handoff handoff_;
  // The workers' loops run on `pool_`, served by threads of ours (named sluice-work-N)
  // until join(): a thread pool whose threads `top -H` and gdb can tell apart.
  std::unique_ptr<boost::asio::io_context> pool_;
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>>
      pool_work_;
  std::vector<std::thread> pool_threads_;
  int threads_ = 0;
  // Handlers run on the I/O thread: set once, before the first receive.
  bool inline_ = false;
  // The slowest recent handler call, decaying by 1/16 a call: sizes the hand-offs.
  std::atomic<std::int64_t> handler_ns_peak_{0};
  // Runs handed off with units unclaimed, and the timer that checks them (I/O thread).
  std::vector<std::shared_ptr<Run>> watched_runs_;
  CoreTimer run_check_;
  bool run_check_armed_ = false;
  std::atomic<int> running_handlers_{0};
  AsyncCondition idle_;  // the stop waits on it for running_handlers_ to reach 0
};

}  // namespace sluice::runtime
