#include "runtime/settlement.hpp"

#include <spdlog/spdlog.h>

#include <boost/asio/co_spawn.hpp>
#include <optional>

#include "runtime/backoff.hpp"
#include "runtime/fault_switch.hpp"
#include "runtime/log_exceptions.hpp"
#include "runtime/worker_stage.hpp"

namespace sluice::runtime {
namespace asio = boost::asio;
using detail::Outcome;

void HeldSet::add(StatePtr state) {
  state->held_slot = static_cast<std::uint32_t>(states_.size());
  states_.push_back(std::move(state));
}

void HeldSet::remove(detail::MessageState* state) {
  const std::size_t slot = state->held_slot;
  if (slot >= states_.size() || states_[slot].get() != state) return;  // not held
  if (slot + 1 != states_.size()) {
    states_[slot] = std::move(states_.back());
    states_[slot]->held_slot = static_cast<std::uint32_t>(slot);
  }
  states_.pop_back();
}

Settlement::Settlement(Core& core, WorkerStage& workers)
    : core_(core),
      workers_(workers),
      permits_(core.options.max_in_flight),
      drained_(core.io.get_executor()) {
  // Sized once (a reservation's untouched pages cost no memory until held messages
  // fill them); past 100,000 it grows as needed.
  held_.reserve(
      std::min<std::size_t>(static_cast<std::size_t>(core.options.max_in_flight), 100000));
}

void Settlement::set_origin(std::string source, std::weak_ptr<detail::Settler> settler,
                            std::shared_ptr<spi::BatchPositions> positions) {
  origin_ = std::make_shared<const detail::Origin>(
      detail::Origin{std::move(source), std::move(settler), std::move(positions)});
}

void Settlement::hold(std::vector<StatePtr>& states, int permits_taken) {
  std::erase_if(states, [](const StatePtr& s) { return s->settled(); });
  permits_.release(permits_taken - static_cast<int>(states.size()));
  if (states.empty()) return;
  auto& counters = core_.counters;
  const auto n = static_cast<std::int64_t>(states.size());
  counters.received.fetch_add(states.size(), std::memory_order_relaxed);
  raise_peak(counters.in_flight_peak, counters.in_flight.fetch_add(n) + n);
  // An extendable source that did not say when a lease runs out: it runs from now.
  if (core_.capabilities.extendable) {
    const auto until = detail::steady_now_ms() + core_.capabilities.lease.count();
    for (auto& s : states)
      if (s->visible_until_ms.load(std::memory_order_relaxed) == 0) s->visible_until_ms = until;
  }
  MutexLock lock(held_mutex_);
  for (auto& s : states) {
    s->origin = origin_;
    held_.add(s);
  }
}

void Settlement::settle(const StatePtr& state, Outcome outcome, std::string reason) {
  auto& counters = core_.counters;
  switch (outcome) {
    case Outcome::ack:
      // Counted before the source may confirm it (on another thread); a source that
      // confirms nothing has it once it is handed over.
      if (core_.capabilities.confirms_acks)
        counters.pending_acks.fetch_add(1, std::memory_order_relaxed);
      else
        counters.acked.fetch_add(1, std::memory_order_relaxed);
      core_.source->ack(state);
      break;
    case Outcome::retry:
      counters.failed.fetch_add(1, std::memory_order_relaxed);
      core_.source->retry(state, backoff_for(state->receive_count));
      break;
    case Outcome::release:
      counters.released.fetch_add(1, std::memory_order_relaxed);
      core_.source->release(state);
      break;
    case Outcome::lost:
      counters.lost.fetch_add(1, std::memory_order_relaxed);
      break;  // nothing to tell the source: the lease is gone
    case Outcome::reject: {
      counters.rejected.fetch_add(1, std::memory_order_relaxed);
      spdlog::warn("container={} event=rejected message_id={}{} reason=\"{}\"", core_.options.name,
                   state->text.id(), trace_field(*state), reason);
      // The message stays held (its permit taken, its group waiting) until the source
      // has it safe: never lose a rejected message.
      ++pending_rejects_;
      asio::co_spawn(core_.io, reject(state, std::move(reason)),
                     [this, alive = core_.owner.lock()](std::exception_ptr) {
                       if (--pending_rejects_ == 0 && core_.stopping.load()) drained_.notify();
                     });
      return;
    }
    case Outcome::none:
      return;
  }
  finish(state, outcome);
}

asio::awaitable<void> Settlement::reject(StatePtr state, std::string reason) {
  Outcome outcome = Outcome::reject;
  try {
    if (co_await core_.source->reject(state, reason))
      core_.counters.dead_lettered.fetch_add(1, std::memory_order_relaxed);
  } catch (...) {
    spdlog::error("container={} event=dead_letter_failed message_id={}{} error=\"{}\"",
                  core_.options.name, state->text.id(), trace_field(*state),
                  describe_current_exception());
    core_.source->retry(state, backoff_for(state->receive_count));
    outcome = Outcome::retry;
  }
  finish(state, outcome, reason);
}

void Settlement::mark_started(const StatePtr& state) {
  if (core_.tracing) core_.tracing->started(state);
  state->started = true;
  started_unfinished_.fetch_add(1);
}

// The message is done with: its permit comes back, its group may move on.
void Settlement::finish(const StatePtr& state, Outcome outcome, const std::string& reason) {
  if (core_.tracing) core_.tracing->settled(state, outcome, reason);
  // The stop set `stopping` before it looked: one of the two sees the other's write.
  if (state->started.load() && started_unfinished_.fetch_sub(1) == 1 && core_.stopping.load())
    drained_.notify();
  if (core_.observer) core_.observer->on_settled(detail::to_string(outcome));
  auto step = core_.dispatch->settled(state, outcome);
  {
    MutexLock lock(held_mutex_);
    held_.remove(state.get());
  }
  auto& counters = core_.counters;
  counters.in_flight.fetch_sub(1, std::memory_order_relaxed);
  if (outcome == Outcome::ack && core_.capabilities.confirms_acks) {
    // Its permit comes back once the queue confirms the ack. When no permit is free,
    // or pending acks hold half of them and intake is short (a small max_in_flight),
    // they go now instead of at the next interval; otherwise full batches go out by
    // themselves and a partial one never holds up intake (each expedite is a request).
    const int free = permits_.available();
    if (free == 0 ||
        (counters.pending_acks.load(std::memory_order_relaxed) * 2 >= core_.options.max_in_flight &&
         free < core_.capabilities.max_batch))
      core_.source->expedite_acks();
  } else {
    permits_.release(SLUICE_FAULT(permit_released_twice) ? 2 : 1);
  }
  for (auto& s : step.release) detail::settle_once(s, Outcome::release);
  if (!step.ready.empty()) workers_.hand_over(std::move(step.ready));
}

void Settlement::acks_settled(std::size_t confirmed, std::size_t abandoned, std::size_t from_ack) {
  auto& counters = core_.counters;
  // A source that confirms nothing had its acks counted as they were handed over.
  if (core_.capabilities.confirms_acks)
    counters.acked.fetch_add(confirmed, std::memory_order_relaxed);
  counters.failed_acks.fetch_add(abandoned, std::memory_order_relaxed);
  if (!core_.capabilities.confirms_acks || from_ack == 0) return;
  const auto n = static_cast<std::int64_t>(from_ack);
  counters.pending_acks.fetch_sub(n, std::memory_order_relaxed);
  permits_.release(static_cast<int>(n));
}

void Settlement::lease_lost(std::uint64_t lease) {
  std::vector<StatePtr> gone;
  {
    MutexLock lock(held_mutex_);
    for (const auto& state : held_)
      if (state->lease == lease && !state->settled()) gone.push_back(state);
  }
  for (auto& s : gone) detail::settle_once(s, Outcome::lost);
  // Nothing held under it (a channel a source closed on purpose): no news.
  spdlog::log(gone.empty() ? spdlog::level::debug : spdlog::level::warn,
              "container={} event=lease_lost lease={} dropped={}", core_.options.name, lease,
              gone.size());
}

std::vector<StatePtr> Settlement::due_for_extension(std::int64_t threshold_ms,
                                                    std::int64_t& remaining_min_ms) {
  std::vector<StatePtr> due;
  const auto now = detail::steady_now_ms();
  std::optional<std::int64_t> least;
  MutexLock lock(held_mutex_);
  for (const auto& state : held_)
    if (!state->settled() && state->visible_until_ms - now < threshold_ms) {
      const auto remaining = state->visible_until_ms - now;
      least = least ? std::min(*least, remaining) : remaining;
      due.push_back(state);
    }
  remaining_min_ms = least.value_or(kNoLeaseDue);
  return due;
}

asio::awaitable<bool> Settlement::drain_started(CoreClock::time_point deadline) {
  co_return co_await drained_.wait_until(deadline,
                                         [this] { return started_unfinished_.load() == 0; });
}

void Settlement::release_unstarted() {
  std::vector<StatePtr> unstarted;
  {
    MutexLock lock(held_mutex_);
    for (const auto& s : held_)
      if (!s->started) unstarted.push_back(s);
  }
  for (auto& s : unstarted) detail::settle_once(s, Outcome::release);
}

asio::awaitable<bool> Settlement::drain_rejects(CoreClock::time_point deadline) {
  co_return co_await drained_.wait_until(deadline, [this] { return pending_rejects_.load() == 0; });
}

std::chrono::milliseconds Settlement::backoff_for(int receive_count) const {
  return failure_backoff(core_.options.failure_backoff_base, core_.options.failure_backoff_max,
                         receive_count, backoff_random());
}

}  // namespace sluice::runtime
