#include "runtime/intake.hpp"

#include <spdlog/spdlog.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "runtime/log_exceptions.hpp"
#include "runtime/settlement.hpp"
#include "runtime/worker_stage.hpp"

namespace sluice::runtime {
namespace asio = boost::asio;

Intake::Intake(Core& core, Settlement& settlement, WorkerStage& workers)
    : core_(core),
      settlement_(settlement),
      workers_(workers),
      scaler_({core.options.min_concurrent_receives, core.options.max_concurrent_receives,
               core.options.consecutive_full_trigger, core.options.consecutive_empty_trigger,
               core.options.start_receive_min_interval, core.options.stop_receive_min_interval}),
      ended_(core.io.get_executor()) {}

void Intake::start(std::function<void()> compose) {
  // Opening is cancelled by the stop like a receive (a frozen endpoint must not hold it).
  auto signal = std::make_shared<asio::cancellation_signal>();
  signals_[kOpening] = signal;
  ++active_;  // the stop waits for the opening as for a receive loop
  asio::co_spawn(
      core_.io, open_and_run(std::move(compose)),
      asio::bind_cancellation_slot(signal->slot(), log_if_thrown(core_.options.name + " open")));
}

asio::awaitable<void> Intake::open_and_run(std::function<void()> compose) {
  auto alive = core_.owner.lock();
  CoreTimer timer(core_.io);
  std::chrono::milliseconds backoff{200};
  for (;;) {
    try {
      co_await core_.source->open();
      break;
    } catch (const SourceError& e) {
      if (e.kind() == SourceErrorKind::cancelled || core_.intake_closed) {
        receiver_gone();
        co_return;
      }
      spdlog::warn("container={} event=open_failed kind={} code={} retry_in_ms={} error=\"{}\"",
                   core_.options.name, spi::to_string(e.kind()), e.code(), backoff.count(),
                   e.what());
    } catch (const std::exception& e) {  // Asio's cancellation, or a source's own throw
      if (core_.intake_closed) {
        receiver_gone();
        co_return;
      }
      spdlog::warn("container={} event=open_failed retry_in_ms={} error=\"{}\"", core_.options.name,
                   backoff.count(), e.what());
    }
    if (!co_await back_off(timer, backoff)) {
      receiver_gone();
      co_return;
    }
  }
  // Its signal stays in signals_: the coroutine's cancellation slot is bound to it.
  receiver_gone();
  if (core_.intake_closed) co_return;
  compose();
  configure_scaling();
  open_ = true;
  if (!core_.paused)
    for (int i = 0; i < scaler_.config().min_receives; ++i) spawn_receiver();
  spdlog::info(
      "container={} event=started source={} ordered_groups={} max_in_flight={} receives={}-{} "
      "workers={}",
      core_.options.name, core_.source->describe(), core_.capabilities.ordered_groups,
      core_.options.max_in_flight, scaler_.config().min_receives, scaler_.config().max_receives,
      workers_.runs_inline() ? std::string("inline") : std::to_string(workers_.threads()));
}

void Intake::configure_scaling() {
  const auto& capabilities = core_.capabilities;
  // A push source's receive only takes what has arrived: one loop does it.
  if (capabilities.push) scaler_.reconfigure(1, 1);
  if (core_.options.auto_concurrency && !capabilities.push) {
    // Never more receives than max_in_flight can fill with full batches.
    AutoConcurrency::Config c;
    c.min = 1;
    c.max = max_auto_receives(core_.options.max_in_flight, capabilities.max_batch);
    auto_concurrency_.emplace(c);
    scaler_.reconfigure(1, c.max);
  }
  if (const double rate = core_.options.max_messages_per_second; rate > 0)
    bucket_.emplace(rate, std::min(rate, static_cast<double>(std::max(1, capabilities.max_batch))),
                    CoreClock::now());
}

void Intake::pause() {
  if (!core_.paused) return;  // resumed since
  if (auto_concurrency_) auto_concurrency_->interrupted(CoreClock::now());
  for (const int id : cancellable_)
    if (const auto it = signals_.find(id); it != signals_.end())
      it->second->emit(asio::cancellation_type::terminal);
  spdlog::info("container={} event=paused receivers_cancelled={}", core_.options.name,
               cancellable_.size());
}

void Intake::resume() {
  if (core_.paused || !open_ || core_.intake_closed) return;
  const int wanted =
      auto_concurrency_ ? std::max(1, last_auto_level_) : scaler_.config().min_receives;
  while (active_ < wanted) spawn_receiver();
  spdlog::info("container={} event=resumed receivers={}", core_.options.name, active_.load());
}

void Intake::set_range(int min, int max) {
  scaler_.reconfigure(min, max);
  if (!open_) return;  // not open yet: the loops start with the new numbers
  while (!core_.intake_closed && active_ < min) spawn_receiver();
}

void Intake::close() {
  for (auto& [id, signal] : signals_) signal->emit(asio::cancellation_type::terminal);
}

asio::awaitable<bool> Intake::drain(CoreClock::time_point deadline) {
  co_return co_await ended_.wait_until(deadline, [this] { return active_.load() == 0; });
}

void Intake::receiver_gone() {
  if (--active_ == 0) ended_.notify();
}

void Intake::spawn_receiver() {
  const int id = next_id_++;
  auto signal = std::make_shared<asio::cancellation_signal>();
  signals_[id] = signal;
  const int now_active = ++active_;
  raise_peak(peak_, now_active);
  if (core_.observer) core_.observer->on_concurrency(now_active);
  asio::co_spawn(
      core_.io, receive_loop(id),
      asio::bind_cancellation_slot(
          signal->slot(), [this, id, alive = core_.owner.lock()](std::exception_ptr e) {
            if (e) {
              try {
                std::rethrow_exception(e);
              } catch (const boost::system::system_error& x) {
                if (x.code() != asio::error::operation_aborted)
                  spdlog::error("container={} event=receiver_crashed error=\"{}\"",
                                core_.options.name, x.what());
              } catch (const std::exception& x) {
                spdlog::error("container={} event=receiver_crashed error=\"{}\"",
                              core_.options.name, x.what());
              }
            }
            signals_.erase(id);
            receiver_gone();
            const int left = active_.load();
            if (core_.observer) core_.observer->on_concurrency(left);
            // Never fall below the minimum while running (e.g. after a crash).
            if (!core_.intake_closed && !core_.paused && left < scaler_.config().min_receives)
              spawn_receiver();
          }));
}

asio::awaitable<bool> Intake::back_off(CoreTimer& timer,
                                       std::chrono::milliseconds& backoff) {
  timer.expires_after(backoff);
  auto [ec] = co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
  backoff = std::min(backoff * 2, core_.options.error_backoff_max);
  co_return !ec && !core_.intake_closed;
}

asio::awaitable<void> Intake::receive_loop(int id) {
  ReceiveScaler::LoopState loop;
  std::chrono::milliseconds error_backoff{200};
  CoreTimer timer(core_.io);
  auto& counters = core_.counters;
  auto& permits = settlement_.permits();
  const auto& name = core_.options.name;
  const int max_batch = core_.capabilities.max_batch;
  struct Uncancellable {  // whatever way the loop ends
    std::set<int>& loops;
    int id;
    ~Uncancellable() { loops.erase(id); }
  } uncancellable{cancellable_, id};
  while (!core_.intake_closed && !core_.paused) {
    int taken = 0;
    cancellable_.insert(id);
    const auto waiting_since = CoreClock::now();
    try {
      taken = co_await permits.acquire_up_to(max_batch);
    } catch (const boost::system::system_error&) {
      co_return;  // cancelled: stopping or pausing
    }
    if (taken == 0 || core_.intake_closed || core_.paused) {
      permits.release(taken);
      co_return;
    }
    const auto permits_waited = CoreClock::now() - waiting_since;
    if (bucket_) {  // max_messages_per_second
      int allowed = 0;
      CoreClock::duration wait{};
      while ((allowed = bucket_->take(taken, CoreClock::now(), wait)) == 0) {
        timer.expires_after(wait);
        auto [ec] = co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
        if (ec || core_.intake_closed || core_.paused) break;
      }
      if (allowed == 0) {
        permits.release(taken);
        co_return;
      }
      permits.release(taken - allowed);
      taken = allowed;
    }
    std::vector<StatePtr> states;
    const auto started = CoreClock::now();
    const auto started_wall =
        core_.tracing ? std::chrono::system_clock::now() : std::chrono::system_clock::time_point{};
    bool receive_failed = false;
    // A receive is never cancelled by a pause: an SQS long poll dropped by the client
    // stays open at the service, which hides what it takes for a visibility timeout.
    // The pause takes effect when it returns, and what it brings is handled.
    cancellable_.erase(id);
    try {
      states = co_await core_.source->receive(taken);
      error_backoff = std::chrono::milliseconds(200);
    } catch (const boost::system::system_error&) {
      permits.release(taken);  // Asio's own cancellation of this loop: stopping
      if (bucket_) bucket_->returned(taken, 0);
      co_return;
    } catch (const SourceError& e) {
      permits.release(taken);
      if (bucket_) bucket_->returned(taken, 0);
      if (e.kind() == SourceErrorKind::cancelled || core_.intake_closed) co_return;
      receive_failed = true;
      counters.receive_errors.fetch_add(1, std::memory_order_relaxed);
      if (core_.observer) core_.observer->on_receive_error(e.what());
      spdlog::warn(
          "container={} event=receive_failed receiver={} kind={} code={} retry_in_ms={} "
          "error=\"{}\"",
          name, id, spi::to_string(e.kind()), e.code(), error_backoff.count(), e.what());
    } catch (...) {
      // A source that throws something else: its permits come back all the same, and
      // the loop backs off as for any failed receive.
      permits.release(taken);
      if (bucket_) bucket_->returned(taken, 0);
      if (core_.intake_closed) co_return;
      receive_failed = true;
      counters.receive_errors.fetch_add(1, std::memory_order_relaxed);
      const std::string what = describe_current_exception();
      if (core_.observer) core_.observer->on_receive_error(what);
      spdlog::warn("container={} event=receive_failed receiver={} retry_in_ms={} error=\"{}\"",
                   name, id, error_backoff.count(), what);
    }
    if (receive_failed) {
      if (auto_concurrency_) auto_concurrency_->interrupted(CoreClock::now());
      // Queue missing, credentials failing, endpoint down: back off, keep trying.
      cancellable_.insert(id);
      if (!co_await back_off(timer, error_backoff)) co_return;
      continue;
    }
    const auto latency = CoreClock::now() - started;
    counters.poll_latency.add(latency);
    if (core_.observer) core_.observer->on_receive(states.size(), latency);
    const std::size_t count = states.size();
    if (count == 0) counters.empty_receives.fetch_add(1, std::memory_order_relaxed);
    if (bucket_) bucket_->returned(taken, static_cast<int>(count));
    settlement_.hold(states, taken);
    if (core_.tracing && !states.empty()) core_.tracing->received(states, started_wall);
    if (!states.empty() && !co_await workers_.take(core_.dispatch->admit(std::move(states)).ready))
      co_return;  // cancelled: what is left is held and unstarted, the stop releases it
    if (auto_concurrency_) {
      const int wanted = auto_concurrency_->after_poll(count, taken, max_batch, latency,
                                                       CoreClock::now(), permits_waited);
      if (core_.intake_closed) continue;
      if (wanted != last_auto_level_)
        spdlog::info("container={} event=receivers_auto receivers={} phase={} window_rate={:.0f}",
                     name, wanted, AutoConcurrency::name(auto_concurrency_->phase()),
                     auto_concurrency_->last_rate());
      last_auto_level_ = wanted;
      if (active_ > wanted) co_return;
      while (active_ < wanted) spawn_receiver();
      continue;
    }
    const bool full = static_cast<int>(count) >= max_batch;
    const auto decision = scaler_.after_poll(loop, count, full, active_,
                                             permits.available() >= max_batch, CoreClock::now());
    if (decision == ReceiveScaler::Decision::start_another && !core_.intake_closed) {
      spdlog::info("container={} event=receivers_up receivers={}", name, active_ + 1);
      spawn_receiver();
    } else if (decision == ReceiveScaler::Decision::stop_this) {
      spdlog::info("container={} event=receivers_down receivers={}", name, active_ - 1);
      co_return;
    }
  }
}

}  // namespace sluice::runtime
