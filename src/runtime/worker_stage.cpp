#include "runtime/worker_stage.hpp"

#include <spdlog/spdlog.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "common/thread_name.hpp"
#include "runtime/fault_switch.hpp"
#include "runtime/log_exceptions.hpp"
#include "runtime/settlement.hpp"
#include "sluice/tracing.hpp"

namespace sluice::runtime {
namespace asio = boost::asio;
using detail::Outcome;

namespace {
// A hand-off wakes a worker (a futex call and a context switch, microseconds): a
// handler known to be fast gets several units per hand-off, up to this much handler
// time, so that wake-ups cost less than the work they carry. "Known to be fast" is
// judged by the slowest recent call (a peak that decays by 1/16 per call), not the
// average: one slow call puts hand-offs back to one unit for the next hundred or so.
// A slow handler (or one not yet timed) gets one unit per hand-off.
constexpr std::chrono::nanoseconds kHandoffBudget = std::chrono::microseconds(50);
// A fast handler can still be slow once (a lock, a network call that stalls): the
// rest of its hand-off must not wait for it. A run whose latest call has gone on this
// long with units unclaimed is offered to another worker, checked this often: with a
// worker free, the rest waits at most about twice this, whatever the slow call takes.
constexpr std::chrono::milliseconds kRunStuckAfter{2};

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(CoreClock::now().time_since_epoch())
      .count();
}
}  // namespace

WorkerStage::WorkerStage(Core& core, Settlement& settlement, Handlers handlers)
    : core_(core),
      settlement_(settlement),
      handlers_(std::move(handlers)),
      handoff_(core.io.get_executor(), static_cast<std::size_t>(core.options.handoff_capacity
                                                                    ? core.options.handoff_capacity
                                                                    : core.options.max_in_flight)),
      run_check_(core.io),
      idle_(core.io.get_executor()) {}

// Joined already on every path of the container's; if not (a start that threw), the
// loops are stopped where they are rather than the process ended by a joinable thread.
WorkerStage::~WorkerStage() {
  stop_pool();
}

void WorkerStage::stop_pool() {
  pool_work_.reset();
  if (pool_) pool_->stop();
  for (auto& thread : pool_threads_) thread.join();
  pool_threads_.clear();
}

void WorkerStage::start(int threads) {
  if (threads == 0) {
    inline_ = true;
    return;
  }
  threads_ = threads;
  if (core_.simulated) {  // the simulation's workers take turns on its one thread
    for (int i = 0; i < threads; ++i)
      asio::co_spawn(core_.io, worker_loop(), log_if_thrown(core_.options.name + " worker"));
    return;
  }
  pool_ = std::make_unique<asio::io_context>(threads);
  pool_work_.emplace(pool_->get_executor());
  for (int i = 0; i < threads; ++i)
    asio::co_spawn(*pool_, worker_loop(), log_if_thrown(core_.options.name + " worker"));
  try {
    for (int i = 0; i < threads; ++i)
      pool_threads_.emplace_back([this, i] {
        common::name_this_thread("sluice-work", i + 1);
        pool_->run();
      });
  } catch (...) {  // no thread to be had (a pids limit): those made are stopped
    stop_pool();
    throw;
  }
}

asio::awaitable<bool> WorkerStage::take(std::vector<Unit> units) {
  if (inline_) {
    handle_inline(units);
    co_return true;
  }
  co_return co_await send(std::move(units));
}

void WorkerStage::hand_over(std::vector<Unit> units) {
  if (core_.draining || core_.intake_closed) {
    for (auto& unit : units) release_unit(unit);
    return;
  }
  if (inline_) {  // posted: this may run inside a handler on the I/O thread
    asio::post(core_.io, [this, alive = core_.owner.lock(), units = std::move(units)]() mutable {
      try {
        handle_inline(units);
      } catch (...) {  // a source's verb threw: what is left goes back to the queue now
        spdlog::error("container={} event=hand_over_failed error=\"{}\"", core_.options.name,
                      describe_current_exception());
        for (auto& unit : units) release_unit(unit);
      }
    });
    return;
  }
  asio::co_spawn(
      core_.io,
      [this, alive = core_.owner.lock(), units = std::move(units)]() mutable
      -> asio::awaitable<void> { co_await send(std::move(units)); },
      log_if_thrown(core_.options.name + " hand-over"));
}

asio::awaitable<bool> WorkerStage::send(std::vector<Unit> units) {
  const std::size_t per_handoff = units_per_handoff(units.size());
  for (std::size_t first = 0; first < units.size(); first += per_handoff) {
    const std::size_t last = std::min(units.size(), first + per_handoff);
    Work work;
    if (last - first == 1) {
      work.unit = std::move(units[first]);
    } else {
      work.run = std::make_shared<Run>();
      work.run->units.assign(
          std::make_move_iterator(units.begin() + static_cast<std::ptrdiff_t>(first)),
          std::make_move_iterator(units.begin() + static_cast<std::ptrdiff_t>(last)));
      work.run->waiting.store(1, std::memory_order_relaxed);
      if (threads_ > 1) watch(work.run);  // one worker: no other to offer it to
    }
    core_.counters.handoffs.fetch_add(1, std::memory_order_relaxed);
    // The common case, room in the hand-off, costs no suspension.
    if (handoff_.try_send(boost::system::error_code{}, std::move(work))) continue;
    auto [ec] = co_await handoff_.async_send(boost::system::error_code{}, std::move(work),
                                             asio::as_tuple(asio::use_awaitable));
    if (ec) {
      for (std::size_t j = last; j < units.size(); ++j) release_unit(units[j]);
      co_return false;
    }
  }
  co_return true;
}

void WorkerStage::watch(std::shared_ptr<Run> run) {
  watched_runs_.push_back(std::move(run));
  if (!run_check_armed_) arm_run_check();
}

void WorkerStage::arm_run_check() {
  run_check_armed_ = true;
  run_check_.expires_after(kRunStuckAfter);
  run_check_.async_wait([this](boost::system::error_code ec) {
    run_check_armed_ = false;
    if (ec || !handoff_.is_open()) {  // stopping: the stop releases what is unclaimed
      watched_runs_.clear();
      return;
    }
    offer_stuck_runs();
    if (!watched_runs_.empty()) arm_run_check();
  });
}

// A run is stuck when no unit of it was claimed since the last check and its latest
// call started over kRunStuckAfter ago (or it waits unstarted in the hand-off, which
// is backpressure, not a stuck call: then nothing is offered). Each offer may wake
// one more worker; a run is offered again only once every hand-off of it was taken
// (every worker busy: no copy piles up behind them), to at most every other worker.
void WorkerStage::offer_stuck_runs() {
  const auto stuck_since = now_ns() - std::chrono::nanoseconds(kRunStuckAfter).count();
  std::erase_if(watched_runs_, [&](const std::shared_ptr<Run>& run) {
    const auto next = run->next.load(std::memory_order_relaxed);
    if (next >= run->units.size()) return true;  // all claimed
    const bool advanced = next != run->next_at_last_check;
    run->next_at_last_check = next;
    const auto started = run->call_started_ns.load(std::memory_order_relaxed);
    if (advanced || started == 0 || started > stuck_since ||
        run->waiting.load(std::memory_order_relaxed) > 0)
      return false;
    run->waiting.fetch_add(1, std::memory_order_relaxed);
    if (!handoff_.try_send(boost::system::error_code{}, Work{{}, run})) {
      run->waiting.fetch_sub(1, std::memory_order_relaxed);
      return false;  // the hand-off is full: every worker is busy, checked again later
    }
    core_.counters.handoffs_shared.fetch_add(1, std::memory_order_relaxed);
    return ++run->offers >= threads_ - 1;
  });
}

std::size_t WorkerStage::units_per_handoff(std::size_t units) const {
  const auto peak = handler_ns_peak_.load(std::memory_order_relaxed);
  if (peak <= 0 || units <= 1) return 1;
  return static_cast<std::size_t>(
      std::clamp<std::int64_t>(kHandoffBudget.count() / peak, 1, static_cast<std::int64_t>(units)));
}

void WorkerStage::release_unit(Unit& unit) {
  for (auto& s : unit) detail::settle_once(s, Outcome::release);
}

asio::awaitable<void> WorkerStage::worker_loop() {
  for (;;) {
    // Simulated workers share one thread: each hand-off is a turn, so that the others
    // (and the receive loops) interleave with it as threads would.
    if (core_.simulated) co_await asio::post(core_.io, asio::use_awaitable);
    // Busy workers take the next hand-off without suspending.
    Work work;
    boost::system::error_code error;
    const bool taken = handoff_.try_receive([&](boost::system::error_code ec, Work w) {
      error = ec;
      work = std::move(w);
    });
    if (!taken) {
      auto [ec, next] = co_await handoff_.async_receive(asio::as_tuple(asio::use_awaitable));
      error = ec;
      work = std::move(next);
    }
    if (error) co_return;  // closed: stopping
    if (work.run) {
      work.run->waiting.fetch_sub(1, std::memory_order_relaxed);
      work_through(*work.run);
    } else {
      handle(work.unit);
    }
  }
}

void WorkerStage::work_through(Run& run) {
  for (std::size_t i = 0;
       (i = run.next.fetch_add(1, std::memory_order_relaxed)) < run.units.size();) {
    run.call_started_ns.store(now_ns(), std::memory_order_relaxed);
    handle(run.units[i]);
  }
}

// On the I/O thread, one unit after the other until intake closes (the rest stay held
// and unstarted: the stop releases them).
void WorkerStage::handle_inline(std::vector<Unit>& units) {
  for (auto& unit : units) {
    if (core_.intake_closed) return;
    handle(unit);
  }
}

// One handler call's worth of messages, on a worker or, inline, on the I/O thread.
void WorkerStage::handle(Unit& unit) {
  // Messages settled while they waited (a lost lease) are not handled, nor those the
  // source could not make ready.
  unit.erase(
      std::remove_if(unit.begin(), unit.end(), [](const StatePtr& s) { return s->settled(); }),
      unit.end());
  const bool draining = core_.draining;
  if (!draining && !unit.empty()) prepare(unit);
  unit.erase(std::remove_if(unit.begin(), unit.end(),
                            [&](const StatePtr& s) {
                              // Released behind an earlier one of its ordered group run
                              // that was unusable just now (settle_unusable retried it).
                              if (s->settled()) return true;
                              if (!s->problem()) return false;
                              if (!draining) settle_unusable(s);
                              return !draining;
                            }),
             unit.end());
  if (unit.empty()) return;
  if (draining) {
    release_unit(unit);
  } else if (core_.options.listener_mode == ListenerMode::batch) {
    run_batch(unit);
  } else {
    run_single(unit.front());
  }
}

void WorkerStage::prepare(Unit& unit) {
  try {
    core_.source->prepare(unit);
  } catch (...) {
    const std::string what = describe_current_exception();
    for (auto& s : unit)
      if (!s->problem()) s->set_problem({true, "prepare_failed", what});
  }
}

void WorkerStage::run_single(const StatePtr& state) {
  settlement_.mark_started(state);
  Message message = detail::MessageAccess::wrap(state);
  ++running_handlers_;
  const auto started = CoreClock::now();
  bool ok = true;
  try {
    // Its publishers send on the message's trace.
    tracing::ScopedContext traced(message.trace_context());
    handlers_.single(message);
  } catch (const std::exception& e) {
    ok = false;
    spdlog::warn("container={} event=handler_failed message_id={}{} receive_count={} error=\"{}\"",
                 core_.options.name, state->text.id(), trace_field(*state), state->receive_count,
                 e.what());
  } catch (...) {
    ok = false;
    spdlog::warn("container={} event=handler_failed message_id={}{} error=unknown",
                 core_.options.name, state->text.id(), trace_field(*state));
  }
  finish_handler(started, ok);
  settle_after_handler(state, ok);
}

void WorkerStage::run_batch(Unit& states) {
  std::vector<Message> messages;
  messages.reserve(states.size());
  for (auto& s : states) {
    settlement_.mark_started(s);
    messages.push_back(detail::MessageAccess::wrap(s));
  }
  ++running_handlers_;
  const auto started = CoreClock::now();
  bool ok = true;
  try {
    handlers_.batch(std::span<Message>(messages));
  } catch (const std::exception& e) {
    ok = false;
    spdlog::warn("container={} event=batch_handler_failed messages={} error=\"{}\"",
                 core_.options.name, states.size(), e.what());
  } catch (...) {
    ok = false;
    spdlog::warn("container={} event=batch_handler_failed messages={} error=unknown",
                 core_.options.name, states.size());
  }
  finish_handler(started, ok);
  for (auto& s : states) settle_after_handler(s, ok);
}

// A message its source could not make ready (an S3 payload that is missing or could
// not be fetched): never handed to the handler.
void WorkerStage::settle_unusable(const StatePtr& state) {
  settlement_.mark_started(state);
  const auto& problem = *state->problem();
  spdlog::warn(
      "container={} event=unusable_message message_id={}{} receive_count={} reason={} "
      "detail=\"{}\"",
      core_.options.name, state->text.id(), trace_field(*state), state->receive_count,
      problem.reason, problem.detail);
  if (problem.retry) {
    detail::settle_once(state, Outcome::retry);
    return;
  }
  if (handlers_.unusable) {
    Message message = detail::MessageAccess::wrap(state);
    try {
      handlers_.unusable(message, problem.reason, problem.detail);
    } catch (...) {
      spdlog::error("container={} event=unusable_handler_failed message_id={}{} error=\"{}\"",
                    core_.options.name, state->text.id(), trace_field(*state),
                    describe_current_exception());
    }
    if (state->settled()) return;
  }
  detail::settle_once(state, Outcome::reject, problem.reason + ": " + problem.detail);
}

void WorkerStage::finish_handler(CoreClock::time_point started, bool ok) {
  const auto latency = CoreClock::now() - started;
  core_.counters.handler_latency.add(latency);
  // The decaying peak (concurrent updates may drop one: harmless).
  const auto ns = std::max<std::int64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(latency).count(), 1);
  const auto peak = handler_ns_peak_.load(std::memory_order_relaxed);
  handler_ns_peak_.store(std::max(ns, peak - peak / 16), std::memory_order_relaxed);
  core_.counters.handler_calls.fetch_add(1, std::memory_order_relaxed);
  if (core_.observer) core_.observer->on_handler(latency, ok);
  // The stop set `stopping` before it looked: one of the two sees the other's write.
  if (running_handlers_.fetch_sub(1) == 1 && core_.stopping.load()) idle_.notify();
}

void WorkerStage::settle_after_handler(const StatePtr& state, bool ok) {
  switch (core_.options.ack_mode) {
    case AckMode::on_success:
      detail::settle_once(state, ok ? Outcome::ack : Outcome::retry);
      break;
    case AckMode::always:
      detail::settle_once(state, Outcome::ack);
      break;
    case AckMode::manual:
      if (!ok) detail::settle_once(state, Outcome::retry);
      if (ok && SLUICE_FAULT(ack_before_commit)) detail::settle_once(state, Outcome::ack);
      break;
  }
}

asio::awaitable<bool> WorkerStage::drain(CoreClock::time_point deadline) {
  co_return co_await idle_.wait_until(deadline, [this] { return running_handlers_.load() == 0; });
}

void WorkerStage::close() {
  handoff_.close();
}

// The loops end once the hand-off is closed; the threads once their work is done.
void WorkerStage::join() {
  pool_work_.reset();
  for (auto& thread : pool_threads_) thread.join();
  pool_threads_.clear();
}

}  // namespace sluice::runtime
