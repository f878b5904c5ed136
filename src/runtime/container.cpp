// The source-agnostic core of the listener container: permits, receive loops,
// the worker pool and its bounded hand-off, settlement, heartbeat, elastic receives
// and the shutdown order. It knows its source only through runtime/source.hpp, and
// composes its stages from the source's capabilities (runtime/dispatch.hpp).
//
// Threads: one I/O thread runs the receive loops, batchers and heartbeat (all
// coroutines on `io`); handlers run on `workers`. Settlement may happen on any
// thread (a handler acking from its own thread, say): it only touches the permit
// pool, the held set and the source's batchers, all of which are thread-safe.
#include "sluice/container.hpp"

#include <spdlog/spdlog.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/experimental/concurrent_channel.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <condition_variable>
#include <deque>
#include <future>
#include <map>
#include <optional>
#include <stdexcept>
#include <thread>

#include "runtime/auto_concurrency.hpp"
#include "runtime/backoff.hpp"
#include "runtime/dispatch.hpp"
#include "runtime/log_exceptions.hpp"
#include "runtime/permits.hpp"
#include "runtime/receive_scaler.hpp"
#include "runtime/source.hpp"
#include "sluice/option_error.hpp"

namespace sluice {
namespace asio = boost::asio;
using detail::Outcome;
using runtime::SourceError;
using runtime::SourceErrorKind;
using runtime::StatePtr;
using runtime::Unit;
using Clock = std::chrono::steady_clock;

// ------------------------------------------------------------------ options

namespace {
[[noreturn]] void bad_option(const std::string& name, const std::string& value,
                             const std::string& expected) {
  throw OptionError("container", name, value, expected);
}
template <class Rep, class Period>
std::string str(std::chrono::duration<Rep, Period> d) {
  return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(d).count()) + " ms";
}
}  // namespace

void validate(const ContainerOptions& o) {
  if (o.max_in_flight < 1)
    bad_option("max_in_flight", std::to_string(o.max_in_flight), "at least 1");
  if (o.min_concurrent_receives < 1)
    bad_option("min_concurrent_receives", std::to_string(o.min_concurrent_receives), "at least 1");
  if (o.max_concurrent_receives < o.min_concurrent_receives)
    bad_option(
        "max_concurrent_receives", std::to_string(o.max_concurrent_receives),
        "at least min_concurrent_receives (" + std::to_string(o.min_concurrent_receives) + ")");
  if (o.worker_threads < 0)
    bad_option("worker_threads", std::to_string(o.worker_threads),
               "0 (handlers on the I/O thread) or more");
  if (o.handoff_capacity < 0)
    bad_option("handoff_capacity", std::to_string(o.handoff_capacity),
               "0 (= max_in_flight) or more");
  if (o.heartbeat_interval < std::chrono::milliseconds(0))
    bad_option("heartbeat_interval", str(o.heartbeat_interval),
               "0 (a third of the source's lease) or more");
  if (o.failure_backoff_base < std::chrono::milliseconds(0))
    bad_option("failure_backoff_base", str(o.failure_backoff_base), "0 or more");
  if (o.failure_backoff_max < o.failure_backoff_base)
    bad_option("failure_backoff_max", str(o.failure_backoff_max),
               "at least failure_backoff_base (" + str(o.failure_backoff_base) + ")");
  if (o.shutdown_deadline < std::chrono::milliseconds(0))
    bad_option("shutdown_deadline", str(o.shutdown_deadline), "0 or more");
  if (o.consecutive_full_trigger < 1)
    bad_option("consecutive_full_trigger", std::to_string(o.consecutive_full_trigger),
               "at least 1");
  if (o.consecutive_empty_trigger < 1)
    bad_option("consecutive_empty_trigger", std::to_string(o.consecutive_empty_trigger),
               "at least 1");
  if (o.error_backoff_max <= std::chrono::milliseconds(0))
    bad_option("error_backoff_max", str(o.error_backoff_max), "more than 0");
}

void parse_concurrency(const std::string& text, ContainerOptions& options) {
  if (text == "auto") {
    options.auto_concurrency = true;
    options.min_concurrent_receives = 1;
    options.max_concurrent_receives = kMaxAutoReceives;
    return;
  }
  options.auto_concurrency = false;
  auto number = [&](const std::string& part) {
    std::size_t used = 0;
    int value = 0;
    try {
      value = std::stoi(part, &used);
    } catch (...) {
      used = 0;
    }
    if (used != part.size() || part.empty() || value < 1)
      bad_option("concurrency", "\"" + text + "\"",
                 "N or MIN-MAX with positive integers (e.g. \"2-4\")");
    return value;
  };
  const auto dash = text.find('-');
  if (dash == std::string::npos) {
    options.min_concurrent_receives = options.max_concurrent_receives = number(text);
  } else {
    options.min_concurrent_receives = number(text.substr(0, dash));
    options.max_concurrent_receives = number(text.substr(dash + 1));
    if (options.max_concurrent_receives < options.min_concurrent_receives)
      bad_option("concurrency", "\"" + text + "\"", "MIN-MAX with MIN <= MAX");
  }
}

// ------------------------------------------------------------------ core

namespace {
// One hand-off to the workers: one or more handler calls' worth of messages.
// One unit inline: a hand-off of one single-listener message allocates nothing.
using Work = boost::container::small_vector<Unit, 1>;
using Handoff = asio::experimental::concurrent_channel<void(boost::system::error_code, Work)>;

// A hand-off wakes a worker (a futex call and a context switch, microseconds): a
// handler known to be fast gets several units per hand-off, up to this much handler
// time, so that wake-ups cost less than the work they carry. "Known to be fast" is
// judged by the slowest recent call (a peak that decays by 1/16 per call), not the
// average: one slow call puts hand-offs back to one unit for the next hundred or so.
// A slow handler (or one not yet timed) gets one unit per hand-off. The first slow
// call after a long fast run can still hold up the rest of its own hand-off (at most
// 50 µs worth of the fast calls before it): the price of one wake-up per batch.
constexpr std::chrono::nanoseconds kHandoffBudget = std::chrono::microseconds(50);
// Workers for a source whose preparation blocks (S3 payloads), when worker_threads
// is 0: such a source never prepares on the I/O thread.
constexpr int kWorkersForBlockingPrepare = 16;

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

// The messages received and not yet finished, owned here: a vector in which each
// message knows its slot, so that adding and removing one costs no allocation (a hash
// map's node was ~60 bytes a held message). Not thread-safe: under held_mutex.
class HeldSet {
 public:
  void add(StatePtr state) {
    state->held_slot = static_cast<std::uint32_t>(states_.size());
    states_.push_back(std::move(state));
  }
  void remove(detail::MessageState* state) {
    const std::size_t slot = state->held_slot;
    if (slot >= states_.size() || states_[slot].get() != state) return;  // not held
    if (slot + 1 != states_.size()) {
      states_[slot] = std::move(states_.back());
      states_[slot]->held_slot = static_cast<std::uint32_t>(slot);
    }
    states_.pop_back();
  }
  void reserve(std::size_t n) { states_.reserve(n); }
  auto begin() const { return states_.begin(); }
  auto end() const { return states_.end(); }

 private:
  std::vector<StatePtr> states_;
};

void raise_peak(std::atomic<std::int64_t>& peak, std::int64_t value) {
  auto seen = peak.load();
  while (value > seen && !peak.compare_exchange_weak(seen, value)) {
  }
}
}  // namespace

struct Container::Impl : detail::Settler, std::enable_shared_from_this<Container::Impl> {
  Impl(ContainerOptions o, SourceFactory factory, MessageHandler single, BatchHandler batch)
      : options((validate(o), std::move(o))),
        source_factory(std::move(factory)),
        single_handler(std::move(single)),
        batch_handler(std::move(batch)),
        permits(options.max_in_flight),
        handoff(io.get_executor(),
                static_cast<std::size_t>(options.handoff_capacity ? options.handoff_capacity
                                                                  : options.max_in_flight)),
        scaler({options.min_concurrent_receives, options.max_concurrent_receives,
                options.consecutive_full_trigger, options.consecutive_empty_trigger,
                options.start_receive_min_interval, options.stop_receive_min_interval}) {
    if (!source_factory)
      throw std::invalid_argument("container " + options.name +
                                  ": no source (expected one from a factory such as "
                                  "make_sqs_source)");
    const bool batch_mode = options.listener_mode == ListenerMode::batch;
    if (batch_mode ? !batch_handler : !single_handler)
      throw std::invalid_argument(std::string("container option listener_mode = ") +
                                  (batch_mode ? "batch" : "single") + ": expected a " +
                                  (batch_mode ? "batch" : "single-message") + " handler to match");
    // Sized once (a reservation's untouched pages cost no memory until held messages
    // fill them); past 100,000 it grows as needed.
    held.reserve(std::min<std::size_t>(static_cast<std::size_t>(options.max_in_flight), 100000));
  }

  // ---------------------------------------------------------------- settle
  // Called once per message, on whichever thread settled it.
  void settle(const StatePtr& state, Outcome outcome, std::string reason) override {
    switch (outcome) {
      case Outcome::ack:
        // Counted before the source may confirm it (on another thread); a source that
        // confirms nothing has it once it is handed over.
        if (capabilities.confirms_acks)
          pending_acks.fetch_add(1, std::memory_order_relaxed);
        else
          acked.fetch_add(1, std::memory_order_relaxed);
        source->ack(state);
        break;
      case Outcome::retry:
        failed.fetch_add(1, std::memory_order_relaxed);
        source->retry(state, backoff_for(state->receive_count));
        break;
      case Outcome::release:
        released.fetch_add(1, std::memory_order_relaxed);
        source->release(state);
        break;
      case Outcome::lost:
        lost.fetch_add(1, std::memory_order_relaxed);
        break;  // nothing to tell the source: the lease is gone
      case Outcome::reject: {
        rejected.fetch_add(1, std::memory_order_relaxed);
        spdlog::warn("container={} event=rejected message_id={} reason=\"{}\"", options.name,
                     state->text.id(), reason);
        // The message stays held (its permit taken, its group waiting) until the
        // source has it safe: never lose a rejected message.
        ++pending_rejects;
        auto self = shared_from_this();
        asio::co_spawn(io, reject(state, std::move(reason)), [self](std::exception_ptr) {
          // On the I/O thread, like the stop's wait for the last one.
          if (--self->pending_rejects == 0) self->rejects_done.cancel();
        });
        return;
      }
      case Outcome::none:
        return;
    }
    finish(state, outcome);
  }

  asio::awaitable<void> reject(StatePtr state, std::string reason) {
    Outcome outcome = Outcome::reject;
    try {
      if (co_await source->reject(state, reason))
        dead_lettered.fetch_add(1, std::memory_order_relaxed);
    } catch (...) {
      spdlog::error("container={} event=dead_letter_failed message_id={} error=\"{}\"",
                    options.name, state->text.id(), runtime::describe_current_exception());
      source->retry(state, backoff_for(state->receive_count));
      outcome = Outcome::retry;
    }
    finish(state, outcome);
  }

  // A handler (or the unusable path) has the message: stop() waits until it is finished.
  void mark_started(const StatePtr& state) {
    state->started = true;
    started_unfinished.fetch_add(1);
  }

  // The message is done with: its permit comes back, its group may move on.
  void finish(const StatePtr& state, Outcome outcome) {
    if (state->started.load() && started_unfinished.fetch_sub(1) == 1 && stopping.load()) {
      // stop() waits for the last one (it set `stopping` before it looked).
      std::lock_guard lock(idle_mutex);
      idle_cv.notify_all();
    }
    if (observer) observer->on_settled(detail::to_string(outcome));
    auto step = dispatch->settled(state, outcome);
    {
      std::lock_guard lock(held_mutex);
      held.remove(state.get());
    }
    in_flight.fetch_sub(1, std::memory_order_relaxed);
    if (outcome == Outcome::ack && capabilities.confirms_acks) {
      // Its permit comes back once the queue confirms the ack. When no permit is free,
      // or pending acks hold half of them and intake is short (a small max_in_flight),
      // they go now instead of at the next interval; otherwise full batches go out by
      // themselves and a partial one never holds up intake (each expedite is a request).
      const int free = permits.available();
      if (free == 0 || (pending_acks.load(std::memory_order_relaxed) * 2 >= options.max_in_flight &&
                        free < capabilities.max_batch))
        source->expedite_acks();
    } else {
      permits.release(1);
    }
    for (auto& s : step.release) detail::settle_once(s, Outcome::release);
    if (!step.ready.empty()) hand_over(std::move(step.ready));
  }

  // Units that became ready outside a receive loop (a group's next message): handed
  // to the workers from the I/O thread.
  void hand_over(std::vector<Unit> units) {
    if (draining || intake_closed) {
      for (auto& unit : units) release_unit(unit);
      return;
    }
    auto self = shared_from_this();
    if (inline_handlers) {  // posted: this may run inside a handler on the I/O thread
      asio::post(io, [self, units = std::move(units)]() mutable {
        try {
          self->handle_inline(units);
        } catch (...) {  // never out of io.run(): the messages stay held, stop() releases them
          spdlog::error("container={} event=hand_over_failed error=\"{}\"", self->options.name,
                        runtime::describe_current_exception());
        }
      });
      return;
    }
    asio::co_spawn(
        io,
        [self, units = std::move(units)]() mutable -> asio::awaitable<void> {
          co_await self->send_units(std::move(units));
        },
        runtime::log_if_thrown(options.name + " hand-over"));
  }

  std::chrono::milliseconds backoff_for(int receive_count) const {
    return runtime::failure_backoff(options.failure_backoff_base, options.failure_backoff_max,
                                    receive_count, runtime::backoff_random());
  }

  void on_lease_lost(std::uint64_t lease) {
    std::vector<StatePtr> gone;
    {
      std::lock_guard lock(held_mutex);
      for (const auto& state : held)
        if (state->lease == lease && !state->settled()) gone.push_back(state);
    }
    for (auto& s : gone) detail::settle_once(s, Outcome::lost);
    spdlog::warn("container={} event=lease_lost lease={} dropped={}", options.name, lease,
                 gone.size());
  }

  // ---------------------------------------------------------------- receive loops
  // A receive loop (or the opening) has ended, on the I/O thread; returns how many are
  // left. stop() waits for none.
  int receiver_gone() {
    const int left = --active_receivers;
    if (left == 0) {
      std::lock_guard lock(receivers_mutex);
      receivers_cv.notify_all();
    }
    return left;
  }

  void spawn_receiver() {
    const int id = next_receiver_id++;
    auto signal = std::make_shared<asio::cancellation_signal>();
    receiver_signals[id] = signal;
    const int now_active = ++active_receivers;
    raise_peak(receivers_peak, now_active);
    if (observer) observer->on_concurrency(now_active);
    auto self = shared_from_this();
    asio::co_spawn(io, receive_loop(id),
                   asio::bind_cancellation_slot(signal->slot(), [self, id](std::exception_ptr e) {
                     if (e) {
                       try {
                         std::rethrow_exception(e);
                       } catch (const boost::system::system_error& x) {
                         if (x.code() != asio::error::operation_aborted)
                           spdlog::error("container={} event=receiver_crashed error=\"{}\"",
                                         self->options.name, x.what());
                       } catch (const std::exception& x) {
                         spdlog::error("container={} event=receiver_crashed error=\"{}\"",
                                       self->options.name, x.what());
                       }
                     }
                     self->receiver_signals.erase(id);
                     const int left = self->receiver_gone();
                     if (self->observer) self->observer->on_concurrency(left);
                     // Never fall below the minimum while running (e.g. after a crash).
                     if (!self->intake_closed && left < self->scaler.config().min_receives)
                       self->spawn_receiver();
                   }));
  }

  // Waits before trying again after a failure; false when stopping.
  asio::awaitable<bool> back_off(asio::steady_timer& timer, std::chrono::milliseconds& backoff) {
    timer.expires_after(backoff);
    auto [ec] = co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
    backoff = std::min(backoff * 2, options.error_backoff_max);
    co_return !ec && !intake_closed;
  }

  asio::awaitable<void> receive_loop(int id) {
    runtime::ReceiveScaler::LoopState loop;
    std::chrono::milliseconds error_backoff{200};
    asio::steady_timer timer(io);
    const int max_batch = capabilities.max_batch;
    while (!intake_closed) {
      int taken = 0;
      const auto waiting_since = Clock::now();
      try {
        taken = co_await permits.acquire_up_to(max_batch);
      } catch (const boost::system::system_error&) {
        co_return;  // cancelled: stopping
      }
      if (taken == 0 || intake_closed) {
        permits.release(taken);
        co_return;
      }
      std::vector<StatePtr> states;
      const auto started = Clock::now();
      bool receive_failed = false;
      try {
        states = co_await source->receive(taken);
        error_backoff = std::chrono::milliseconds(200);
      } catch (const boost::system::system_error&) {
        permits.release(taken);  // Asio's own cancellation of this loop: stopping
        co_return;
      } catch (const SourceError& e) {
        permits.release(taken);
        if (e.kind() == SourceErrorKind::cancelled || intake_closed) co_return;
        receive_failed = true;
        receive_errors.fetch_add(1, std::memory_order_relaxed);
        if (observer) observer->on_receive_error(e.what());
        spdlog::warn(
            "container={} event=receive_failed receiver={} kind={} code={} retry_in_ms={} "
            "error=\"{}\"",
            options.name, id, spi::to_string(e.kind()), e.code(), error_backoff.count(), e.what());
      } catch (...) {
        // A source that throws something else: its permits come back all the same, and
        // the loop backs off as for any failed receive.
        permits.release(taken);
        if (intake_closed) co_return;
        receive_failed = true;
        receive_errors.fetch_add(1, std::memory_order_relaxed);
        const std::string what = runtime::describe_current_exception();
        if (observer) observer->on_receive_error(what);
        spdlog::warn("container={} event=receive_failed receiver={} retry_in_ms={} error=\"{}\"",
                     options.name, id, error_backoff.count(), what);
      }
      if (receive_failed) {
        if (auto_concurrency) auto_concurrency->interrupted(Clock::now());
        // Queue missing, credentials failing, endpoint down: back off, keep trying.
        if (!co_await back_off(timer, error_backoff)) co_return;
        continue;
      }
      const auto latency = Clock::now() - started;
      poll_latency.add(latency);
      if (observer) observer->on_receive(states.size(), latency);
      const std::size_t count = states.size();
      // One settled before the core took it told no one (its origin was not set yet):
      // it is not held, its permit comes back, and the queue delivers it again.
      std::erase_if(states, [](const StatePtr& s) { return s->settled(); });
      permits.release(taken - static_cast<int>(states.size()));
      if (count == 0) empty_receives.fetch_add(1, std::memory_order_relaxed);
      if (!states.empty()) {
        received.fetch_add(states.size(), std::memory_order_relaxed);
        raise_peak(in_flight_peak, in_flight.fetch_add(static_cast<std::int64_t>(states.size())) +
                                       static_cast<std::int64_t>(states.size()));
        // An extendable source that did not say when a lease runs out: it runs from now.
        if (capabilities.extendable) {
          const auto until = detail::steady_now_ms() + capabilities.lease.count();
          for (auto& s : states)
            if (s->visible_until_ms.load(std::memory_order_relaxed) == 0)
              s->visible_until_ms = until;
        }
        {
          std::lock_guard lock(held_mutex);
          for (auto& s : states) {
            s->origin = origin;
            held.add(s);
          }
        }
        auto ready = dispatch->admit(std::move(states)).ready;
        if (inline_handlers) {
          handle_inline(ready);
        } else if (!co_await send_units(std::move(ready))) {
          co_return;  // cancelled: what is left is held and unstarted, stop() releases it
        }
      }
      if (auto_concurrency) {
        const int wanted = auto_concurrency->after_poll(count, taken, max_batch, latency,
                                                        Clock::now(), started - waiting_since);
        if (intake_closed) continue;
        if (wanted != last_auto_level)
          spdlog::info("container={} event=receivers_auto receivers={} phase={} window_rate={:.0f}",
                       options.name, wanted,
                       runtime::AutoConcurrency::name(auto_concurrency->phase()),
                       auto_concurrency->last_rate());
        last_auto_level = wanted;
        if (active_receivers > wanted) co_return;
        while (active_receivers < wanted) spawn_receiver();
        continue;
      }
      const bool full = static_cast<int>(count) >= max_batch;
      const auto decision = scaler.after_poll(loop, count, full, active_receivers,
                                              permits.available() >= max_batch, Clock::now());
      if (decision == runtime::ReceiveScaler::Decision::start_another && !intake_closed) {
        spdlog::info("container={} event=receivers_up receivers={}", options.name,
                     active_receivers + 1);
        spawn_receiver();
      } else if (decision == runtime::ReceiveScaler::Decision::stop_this) {
        spdlog::info("container={} event=receivers_down receivers={}", options.name,
                     active_receivers - 1);
        co_return;
      }
    }
  }

  // Hands units to the workers; suspends while the hand-off is full (backpressure).
  // Returns false when stopping interrupted it (the rest were released).
  asio::awaitable<bool> send_units(std::vector<Unit> units) {
    const std::size_t per_handoff = units_per_handoff(units.size());
    for (std::size_t first = 0; first < units.size(); first += per_handoff) {
      const std::size_t last = std::min(units.size(), first + per_handoff);
      Work work(std::make_move_iterator(units.begin() + static_cast<std::ptrdiff_t>(first)),
                std::make_move_iterator(units.begin() + static_cast<std::ptrdiff_t>(last)));
      handoffs.fetch_add(1, std::memory_order_relaxed);
      // The common case, room in the hand-off, costs no suspension.
      if (handoff.try_send(boost::system::error_code{}, std::move(work))) continue;
      auto [ec] = co_await handoff.async_send(boost::system::error_code{}, std::move(work),
                                              asio::as_tuple(asio::use_awaitable));
      if (ec) {
        for (std::size_t j = last; j < units.size(); ++j) release_unit(units[j]);
        co_return false;
      }
    }
    co_return true;
  }

  std::size_t units_per_handoff(std::size_t units) const {
    const auto peak = handler_ns_peak.load(std::memory_order_relaxed);
    if (peak <= 0 || units <= 1) return 1;
    return static_cast<std::size_t>(std::clamp<std::int64_t>(kHandoffBudget.count() / peak, 1,
                                                             static_cast<std::int64_t>(units)));
  }

  static void release_unit(Unit& unit) {
    for (auto& s : unit) detail::settle_once(s, Outcome::release);
  }

  // ---------------------------------------------------------------- workers
  asio::awaitable<void> worker_loop() {
    for (;;) {
      // Busy workers take the next hand-off without suspending.
      Work work;
      boost::system::error_code error;
      const bool taken = handoff.try_receive([&](boost::system::error_code ec, Work w) {
        error = ec;
        work = std::move(w);
      });
      if (!taken) {
        auto [ec, next] = co_await handoff.async_receive(asio::as_tuple(asio::use_awaitable));
        error = ec;
        work = std::move(next);
      }
      if (error) co_return;  // closed: stopping
      for (auto& unit : work) handle(unit);
    }
  }

  // On the I/O thread, one unit after the other until intake closes (the rest stay
  // held and unstarted: stop() releases them).
  void handle_inline(std::vector<Unit>& units) {
    for (auto& unit : units) {
      if (intake_closed) return;
      handle(unit);
    }
  }

  // One handler call's worth of messages, on a worker or, inline, on the I/O thread.
  void handle(Unit& unit) {
    // Messages settled while they waited (a lost lease) are not handled, nor those
    // the source could not make ready.
    unit.erase(
        std::remove_if(unit.begin(), unit.end(), [](const StatePtr& s) { return s->settled(); }),
        unit.end());
    if (!draining && !unit.empty()) prepare(unit);
    unit.erase(std::remove_if(unit.begin(), unit.end(),
                              [this](const StatePtr& s) {
                                if (!s->problem()) return false;
                                if (!draining) settle_unusable(s);
                                return !draining;
                              }),
               unit.end());
    if (unit.empty()) return;
    if (draining) {
      release_unit(unit);
    } else if (options.listener_mode == ListenerMode::batch) {
      run_batch(unit);
    } else {
      run_single(unit.front());
    }
  }

  void run_single(const StatePtr& state) {
    mark_started(state);
    Message message = detail::MessageAccess::wrap(state);
    ++running_handlers;
    const auto started = Clock::now();
    bool ok = true;
    try {
      single_handler(message);
    } catch (const std::exception& e) {
      ok = false;
      spdlog::warn("container={} event=handler_failed message_id={} receive_count={} error=\"{}\"",
                   options.name, state->text.id(), state->receive_count, e.what());
    } catch (...) {
      ok = false;
      spdlog::warn("container={} event=handler_failed message_id={} error=unknown", options.name,
                   state->text.id());
    }
    finish_handler(started, ok);
    settle_after_handler(state, ok);
  }

  void run_batch(Unit& states) {
    std::vector<Message> messages;
    messages.reserve(states.size());
    for (auto& s : states) {
      mark_started(s);
      messages.push_back(detail::MessageAccess::wrap(s));
    }
    ++running_handlers;
    const auto started = Clock::now();
    bool ok = true;
    try {
      batch_handler(std::span<Message>(messages));
    } catch (const std::exception& e) {
      ok = false;
      spdlog::warn("container={} event=batch_handler_failed messages={} error=\"{}\"", options.name,
                   states.size(), e.what());
    } catch (...) {
      ok = false;
      spdlog::warn("container={} event=batch_handler_failed messages={} error=unknown",
                   options.name, states.size());
    }
    finish_handler(started, ok);
    for (auto& s : states) settle_after_handler(s, ok);
  }

  void prepare(Unit& unit) {
    try {
      source->prepare(unit);
    } catch (...) {
      const std::string what = runtime::describe_current_exception();
      for (auto& s : unit)
        if (!s->problem()) s->set_problem({true, "prepare_failed", what});
    }
  }

  // A message its source could not make ready (an S3 payload that is missing or
  // could not be fetched): never handed to the handler.
  void settle_unusable(const StatePtr& state) {
    mark_started(state);
    const auto& problem = *state->problem();
    spdlog::warn(
        "container={} event=unusable_message message_id={} receive_count={} reason={} "
        "detail=\"{}\"",
        options.name, state->text.id(), state->receive_count, problem.reason, problem.detail);
    if (problem.retry) {
      detail::settle_once(state, Outcome::retry);
      return;
    }
    if (unusable_handler) {
      Message message = detail::MessageAccess::wrap(state);
      try {
        unusable_handler(message, problem.reason, problem.detail);
      } catch (...) {
        spdlog::error("container={} event=unusable_handler_failed message_id={} error=\"{}\"",
                      options.name, state->text.id(), runtime::describe_current_exception());
      }
      if (state->settled()) return;
    }
    detail::settle_once(state, Outcome::reject, problem.reason + ": " + problem.detail);
  }

  void finish_handler(Clock::time_point started, bool ok) {
    const auto latency = Clock::now() - started;
    handler_latency.add(latency);
    // The decaying peak (concurrent updates may drop one: harmless).
    const auto ns = std::max<std::int64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(latency).count(), 1);
    const auto peak = handler_ns_peak.load(std::memory_order_relaxed);
    handler_ns_peak.store(std::max(ns, peak - peak / 16), std::memory_order_relaxed);
    handler_calls.fetch_add(1, std::memory_order_relaxed);
    if (observer) observer->on_handler(latency, ok);
    {
      std::lock_guard lock(idle_mutex);
      --running_handlers;
    }
    idle_cv.notify_all();
  }

  void settle_after_handler(const StatePtr& state, bool ok) {
    switch (options.ack_mode) {
      case AckMode::on_success:
        detail::settle_once(state, ok ? Outcome::ack : Outcome::retry);
        break;
      case AckMode::always:
        detail::settle_once(state, Outcome::ack);
        break;
      case AckMode::manual:
        if (!ok) detail::settle_once(state, Outcome::retry);
        break;
    }
  }

  // ---------------------------------------------------------------- heartbeat
  asio::awaitable<void> heartbeat_loop(std::chrono::milliseconds interval) {
    const std::int64_t threshold_ms = capabilities.lease.count() / 2;
    while (!heartbeat_stopped) {
      heartbeat_timer.expires_after(interval);
      auto [ec] = co_await heartbeat_timer.async_wait(asio::as_tuple(asio::use_awaitable));
      if (ec || heartbeat_stopped) co_return;
      std::vector<StatePtr> due;
      const auto now = detail::steady_now_ms();
      std::int64_t remaining_min = -1;
      {
        std::lock_guard lock(held_mutex);
        for (const auto& state : held)
          if (!state->settled() && state->visible_until_ms - now < threshold_ms) {
            const auto remaining = state->visible_until_ms - now;
            remaining_min = remaining_min < 0 ? remaining : std::min(remaining_min, remaining);
            due.push_back(state);
          }
      }
      // How close held messages came to being delivered again (a starved heartbeat
      // shows as this falling towards 0).
      lease_remaining_min_ms = remaining_min;
      if (due.empty()) continue;
      try {
        const auto n = co_await source->extend(std::move(due));
        visibility_extensions.fetch_add(n, std::memory_order_relaxed);
      } catch (const SourceError& e) {
        if (e.kind() == SourceErrorKind::cancelled) co_return;
        spdlog::warn("container={} event=heartbeat_failed error=\"{}\"", options.name, e.what());
      }
    }
  }

  // ---------------------------------------------------------------- lifecycle
  void start() {
    std::lock_guard lock(lifecycle_mutex);
    if (state != State::idle)
      throw std::logic_error("container " + options.name + " already started");
    runtime::SourceContext context;
    context.executor = io.get_executor();
    context.name = options.name;
    std::weak_ptr<Impl> weak = weak_from_this();
    context.acks_settled = [weak](std::size_t confirmed, std::size_t abandoned,
                                  std::size_t from_ack) {
      auto self = weak.lock();
      if (!self) return;
      // A source that confirms nothing had its acks counted as they were handed over.
      if (self->capabilities.confirms_acks)
        self->acked.fetch_add(confirmed, std::memory_order_relaxed);
      self->failed_acks.fetch_add(abandoned, std::memory_order_relaxed);
      if (!self->capabilities.confirms_acks || from_ack == 0) return;
      const auto n = static_cast<std::int64_t>(from_ack);
      self->pending_acks.fetch_sub(n, std::memory_order_relaxed);
      self->permits.release(static_cast<int>(n));
    };
    context.warning = [name = options.name](const std::string& what) {
      spdlog::warn("container={} event=source_warning detail=\"{}\"", name, what);
    };
    context.lease_lost = [weak](std::uint64_t lease) {
      if (auto self = weak.lock()) self->on_lease_lost(lease);
    };
    context.max_in_flight = options.max_in_flight;
    context.gauge = [weak](const std::string& name, double value) {
      if (auto self = weak.lock(); self && self->observer)
        self->observer->on_source_gauge(name, value);
    };
    source = source_factory(context);  // throws SourceError (configuration)
    origin = std::make_shared<const detail::Origin>(
        detail::Origin{source->message_source(), weak_from_this()});
    if (options.worker_threads > 0) start_workers(options.worker_threads);
    // Opening is cancelled by stop() like a receive (a frozen endpoint must not hold it).
    auto open_signal = std::make_shared<asio::cancellation_signal>();
    receiver_signals[kOpening] = open_signal;
    asio::co_spawn(io, open_and_run(),
                   asio::bind_cancellation_slot(open_signal->slot(),
                                                runtime::log_if_thrown(options.name + " open")));
    // The I/O thread runs until stop(), even while a source has nothing pending.
    io_work.emplace(io.get_executor());
    io_thread = std::thread([this] {
      io.run();
      io_thread_done = true;
    });
    state = State::running;
  }

  void start_workers(int threads) {
    workers = std::make_unique<asio::thread_pool>(static_cast<std::size_t>(threads));
    for (int i = 0; i < threads; ++i)
      asio::co_spawn(*workers, worker_loop(), runtime::log_if_thrown(options.name + " worker"));
  }

  // Opens the source (trying again while it fails), then composes the stages from
  // what the source can do and starts the receive loops.
  asio::awaitable<void> open_and_run() {
    auto self = shared_from_this();
    asio::steady_timer timer(io);
    std::chrono::milliseconds backoff{200};
    ++active_receivers;  // stop() waits for this coroutine as for a receive loop
    for (;;) {
      try {
        co_await source->open();
        break;
      } catch (const SourceError& e) {
        if (e.kind() == SourceErrorKind::cancelled || intake_closed) {
          receiver_gone();
          co_return;
        }
        spdlog::warn("container={} event=open_failed kind={} code={} retry_in_ms={} error=\"{}\"",
                     options.name, spi::to_string(e.kind()), e.code(), backoff.count(), e.what());
      } catch (const std::exception& e) {  // Asio's cancellation, or a source's own throw
        if (intake_closed) {
          receiver_gone();
          co_return;
        }
        spdlog::warn("container={} event=open_failed retry_in_ms={} error=\"{}\"", options.name,
                     backoff.count(), e.what());
      }
      if (!co_await back_off(timer, backoff)) {
        receiver_gone();
        co_return;
      }
    }
    receiver_gone();
    if (intake_closed) co_return;
    capabilities = source->capabilities();
    const bool batch = options.listener_mode == ListenerMode::batch;
    dispatch = capabilities.ordered_groups ? runtime::make_ordered_groups(batch)
                                           : runtime::make_direct_dispatch(batch);
    permits.set_wake_threshold(capabilities.max_batch);
    if (options.worker_threads == 0) {
      if (capabilities.blocking_prepare) {
        spdlog::info(
            "container={} event=workers_for_blocking_source workers={} (worker_threads is 0, "
            "but this source's preparation blocks: it never runs on the I/O thread)",
            options.name, kWorkersForBlockingPrepare);
        start_workers(kWorkersForBlockingPrepare);
      } else {
        inline_handlers = true;
      }
    }
    if (options.heartbeat && capabilities.extendable && capabilities.lease.count() > 0) {
      auto interval = options.heartbeat_interval.count() > 0 ? options.heartbeat_interval
                                                             : capabilities.lease / 3;
      if (interval >= capabilities.lease / 2) {
        spdlog::warn(
            "container={} event=heartbeat_interval_too_long heartbeat_interval_ms={} "
            "lease_ms={} using_ms={}",
            options.name, interval.count(), capabilities.lease.count(),
            (capabilities.lease / 3).count());
        interval = capabilities.lease / 3;
      }
      asio::co_spawn(io, heartbeat_loop(std::max(interval, std::chrono::milliseconds(1))),
                     runtime::log_if_thrown(options.name + " heartbeat"));
    }
    // A push source's receive only takes what has arrived: one loop does it.
    if (capabilities.push) scaler.reconfigure(1, 1);
    if (options.auto_concurrency && !capabilities.push) {
      // Never more receives than max_in_flight can fill with full batches.
      runtime::AutoConcurrency::Config c;
      c.min = 1;
      c.max = std::clamp(options.max_in_flight / std::max(1, capabilities.max_batch), 1,
                         kMaxAutoReceives);
      auto_concurrency.emplace(c);
      scaler.reconfigure(1, c.max);
    }
    for (int i = 0; i < scaler.config().min_receives; ++i) spawn_receiver();
    spdlog::info(
        "container={} event=started source={} ordered_groups={} max_in_flight={} receives={}-{} "
        "workers={}",
        options.name, source->describe(), capabilities.ordered_groups, options.max_in_flight,
        scaler.config().min_receives, scaler.config().max_receives,
        inline_handlers ? std::string("inline")
        : workers       ? std::to_string(options.worker_threads > 0 ? options.worker_threads
                                                                    : kWorkersForBlockingPrepare)
                        : std::string("0"));
  }

  // Runs f on the I/O thread and waits for it until `deadline`; false if it did not run
  // by then (an inline handler holds the I/O thread): f still runs when it can, so it
  // must capture nothing from the caller's frame.
  template <class F>
  bool on_io(F f, Clock::time_point deadline) {
    auto done = std::make_shared<std::promise<void>>();
    auto ran = done->get_future();
    asio::post(io, [f = std::move(f), done] {
      f();
      done->set_value();
    });
    return ran.wait_until(deadline) == std::future_status::ready;
  }

  void stop(std::chrono::milliseconds deadline_after) {
    std::lock_guard lock(lifecycle_mutex);
    if (state != State::running) return;
    state = State::stopping;
    const auto deadline = Clock::now() + deadline_after;
    const auto stop_started = Clock::now();

    // 1. Stop intake: no new receives; open long polls are cancelled at once.
    intake_closed = true;
    permits.close();
    on_io(
        [self = shared_from_this()] {
          for (auto& [id, signal] : self->receiver_signals)
            signal->emit(asio::cancellation_type::terminal);
        },
        deadline);
    {
      std::unique_lock lock(receivers_mutex);
      receivers_cv.wait_until(lock, deadline, [this] { return active_receivers.load() == 0; });
    }

    // 2. Units handed off but not started are released; running handlers go on.
    draining = true;
    source->stop_preparing();
    // 3. Wait, until the deadline, for running handlers and for messages whose handler
    //    returned but which are settled later (manual acks, e.g. by a sink writer).
    stopping = true;
    {
      std::unique_lock idle_lock(idle_mutex);
      idle_cv.wait_until(idle_lock, deadline, [this] {
        return running_handlers.load() == 0 && started_unfinished.load() == 0;
      });
    }
    const int still_running = running_handlers.load();
    // 4. Release everything held and not started (hand-off queue, messages waiting
    //    behind their group).
    handoff.close();
    std::vector<StatePtr> unstarted;
    {
      std::lock_guard held_lock(held_mutex);
      for (const auto& s : held)
        if (!s->started) unstarted.push_back(s);
    }
    for (auto& s : unstarted) detail::settle_once(s, Outcome::release);
    // 5. Wait for rejects to reach the dead-letter destination, flush acks and
    //    settlements, stop the heartbeat.
    auto flushed = asio::co_spawn(
        io,
        [this]() -> asio::awaitable<void> {
          // The last reject's completion (on this thread) cancels the wait.
          while (pending_rejects.load() > 0) {
            rejects_done.expires_at(asio::steady_timer::time_point::max());
            co_await rejects_done.async_wait(asio::as_tuple(asio::use_awaitable));
          }
          if (source) co_await source->flush();
          heartbeat_stopped = true;
          heartbeat_timer.cancel();
        },
        asio::use_future);
    // The flush gets what is left of the deadline (at least kFinalFlushMin): what it
    // cannot send in that time is not lost, the queue delivers it again.
    if (flushed.wait_until(std::max(deadline, Clock::now() + kFinalFlushMin)) !=
        std::future_status::ready)
      spdlog::error(
          "container={} event=flush_timeout (acks not confirmed: those messages are delivered "
          "again)",
          options.name);
    state = State::stopped;
    io_work.reset();
    io.stop();
    if (io_thread.joinable()) {
      // An inline handler stuck past the deadline holds the I/O thread: it is left
      // behind like a stuck worker (the destructor keeps the core alive for it).
      if (inline_handlers && still_running > 0 && !io_thread_done) {
        io_thread.detach();
        io_thread_abandoned = true;
      } else {
        io_thread.join();
      }
    }
    if (still_running == 0) {
      if (workers) workers->join();
    } else {
      spdlog::warn(
          "container={} event=stop_deadline handlers_still_running={} (their messages "
          "will be delivered again)",
          options.name, still_running);
    }
    spdlog::info(
        "container={} event=stopped took_ms={} received={} acked={} failed={} released={} "
        "lost={}",
        options.name,
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - stop_started).count(),
        received.load(), acked.load(), failed.load(), released.load(), lost.load());
  }

  ContainerStats stats() const {
    ContainerStats s;
    s.received = received.load();
    s.acked = acked.load();
    s.failed = failed.load();
    s.released = released.load();
    s.lost = lost.load();
    s.rejected = rejected.load();
    s.dead_lettered = dead_lettered.load();
    s.empty_receives = empty_receives.load();
    s.receive_errors = receive_errors.load();
    s.visibility_extensions = visibility_extensions.load();
    s.handler_calls = handler_calls.load();
    s.handoffs = handoffs.load();
    s.failed_acks = failed_acks.load();
    s.pending_acks = pending_acks.load();
    s.lease_remaining_min_ms = lease_remaining_min_ms.load();
    s.in_flight = in_flight.load();
    s.in_flight_peak = in_flight_peak.load();
    s.concurrent_receives = active_receivers.load();
    s.concurrent_receives_peak = static_cast<int>(receivers_peak.load());
    s.poll_latency_ms_avg = poll_latency.average_ms();
    s.handler_latency_ms_avg = handler_latency.average_ms();
    return s;
  }

  enum class State { idle, running, stopping, stopped };

  ContainerOptions options;
  SourceFactory source_factory;
  MessageHandler single_handler;
  BatchHandler batch_handler;
  UnusableHandler unusable_handler;
  std::shared_ptr<ContainerObserver> observer;

  asio::io_context io;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> io_work;
  std::thread io_thread;
  std::unique_ptr<asio::thread_pool> workers;
  std::unique_ptr<runtime::Source> source;
  runtime::SourceCapabilities capabilities;     // once the source is open
  std::unique_ptr<runtime::Dispatch> dispatch;  // once the source is open
  runtime::Permits permits;
  Handoff handoff;
  runtime::ReceiveScaler scaler;
  std::optional<runtime::AutoConcurrency> auto_concurrency;  // concurrency: auto
  // Handlers run on the I/O thread (worker_threads 0, a source that never blocks in
  // prepare): set once at open, before the first receive.
  bool inline_handlers = false;
  std::atomic<std::int64_t> handler_ns_peak{0};
  std::atomic<bool> io_thread_done{false};
  // The I/O thread was left running (an inline handler stuck past stop's deadline):
  // the core is never freed under it.
  bool io_thread_abandoned = false;
  int last_auto_level = 0;  // its last logged level

  std::mutex lifecycle_mutex;
  // Written under lifecycle_mutex by start() and stop(); read by running() from any
  // thread.
  std::atomic<State> state{State::idle};
  // Guards `options` against options()'s copy while set_concurrent_receives changes the
  // receive range (on the I/O thread, the only writer).
  mutable std::mutex options_mutex;
  std::atomic<bool> intake_closed{false};
  std::atomic<bool> draining{false};
  std::atomic<bool> heartbeat_stopped{false};
  asio::steady_timer heartbeat_timer{io};

  // I/O thread only (and start(), before the I/O thread runs).
  static constexpr int kOpening = -1;  // the signal of open_and_run()
  std::map<int, std::shared_ptr<asio::cancellation_signal>> receiver_signals;
  int next_receiver_id = 0;
  std::atomic<int> active_receivers{0};
  // stop() waits on it for the receive loops (and the opening) to end.
  std::mutex receivers_mutex;
  std::condition_variable receivers_cv;
  std::atomic<std::int64_t> receivers_peak{0};

  std::mutex held_mutex;
  HeldSet held;
  std::shared_ptr<const detail::Origin> origin;  // every message's

  std::mutex idle_mutex;
  std::condition_variable idle_cv;
  std::atomic<int> running_handlers{0};
  // Messages started (handed to a handler) and not yet finished: stop() waits for 0.
  std::atomic<int> started_unfinished{0};
  std::atomic<bool> stopping{false};  // stop() is waiting for the above
  std::atomic<int> pending_rejects{0};
  asio::steady_timer rejects_done{io};  // cancelled when pending_rejects falls to 0

  std::atomic<std::uint64_t> received{0}, acked{0}, failed{0}, released{0}, lost{0}, rejected{0},
      dead_lettered{0}, empty_receives{0}, receive_errors{0}, visibility_extensions{0},
      handler_calls{0}, failed_acks{0}, handoffs{0};
  std::atomic<std::int64_t> pending_acks{0};
  std::atomic<std::int64_t> lease_remaining_min_ms{-1};  // at the latest heartbeat round
  std::atomic<std::int64_t> in_flight{0}, in_flight_peak{0};
  LatencyAverage poll_latency, handler_latency;
};

Container::Container(ContainerOptions options, SourceFactory source, MessageHandler handler)
    : impl_(std::make_shared<Impl>(std::move(options), std::move(source), std::move(handler),
                                   BatchHandler{})) {}

Container::Container(ContainerOptions options, SourceFactory source, BatchHandler handler)
    : impl_(std::make_shared<Impl>(std::move(options), std::move(source), MessageHandler{},
                                   std::move(handler))) {}

Container::~Container() {
  stop();
  if (impl_->running_handlers.load() == 0 && !impl_->io_thread_abandoned) {
    if (impl_->workers) impl_->workers->join();
    return;
  }
  // Handlers that outlived the stop deadline: joining them could hang forever (a
  // handler stuck in a call). Their threads are abandoned, with the core kept alive
  // for them (their messages were not acked: the queue delivers them again).
  spdlog::warn("container={} event=handlers_abandoned handlers={}", impl_->options.name,
               impl_->running_handlers.load());
  static auto* abandoned = new std::vector<std::shared_ptr<Impl>>();  // never destroyed
  static std::mutex abandoned_mutex;
  std::lock_guard lock(abandoned_mutex);
  abandoned->push_back(std::move(impl_));
}

void Container::start() {
  impl_->start();
}
void Container::stop(std::chrono::milliseconds deadline) {
  impl_->stop(deadline);
}
void Container::stop() {
  impl_->stop(impl_->options.shutdown_deadline);
}
bool Container::running() const {
  return impl_->state == Impl::State::running;
}
// Both are read without a lock by every thread of a running container: set before start.
void Container::set_observer(std::shared_ptr<ContainerObserver> observer) {
  if (impl_->state.load() != Impl::State::idle)
    throw std::logic_error("Container::set_observer: call it before start()");
  impl_->observer = std::move(observer);
}
void Container::set_unusable_handler(UnusableHandler handler) {
  if (impl_->state.load() != Impl::State::idle)
    throw std::logic_error("Container::set_unusable_handler: call it before start()");
  impl_->unusable_handler = std::move(handler);
}
ContainerStats Container::stats() const {
  return impl_->stats();
}
ContainerOptions Container::options() const {
  std::lock_guard lock(impl_->options_mutex);
  return impl_->options;
}
const std::string& Container::name() const {
  return impl_->options.name;
}

void Container::set_concurrent_receives(int min, int max) {
  if (min < 1 || max < min)
    throw std::invalid_argument("container concurrent receives " + std::to_string(min) + "-" +
                                std::to_string(max) + ": expected 1 <= min <= max");
  auto impl = impl_;
  asio::post(impl->io, [impl, min, max] {
    if (impl->dispatch && impl->capabilities.push) {  // the source scales its consumers
      impl->source->set_concurrency(min, max);
      return;
    }
    impl->scaler.reconfigure(min, max);
    {
      std::lock_guard lock(impl->options_mutex);
      impl->options.min_concurrent_receives = min;
      impl->options.max_concurrent_receives = max;
    }
    if (!impl->dispatch) return;  // not open yet: the loops start with the new numbers
    while (!impl->intake_closed && impl->active_receivers < min) impl->spawn_receiver();
  });
}

}  // namespace sluice
