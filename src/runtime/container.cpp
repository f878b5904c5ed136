// The listener container: composes the core's parts (runtime/core.hpp names them)
// from what its source can do, and runs their start and their stop. It knows its
// source only through the source SPI.
#include "sluice/container.hpp"

#include <spdlog/spdlog.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <future>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>

#include "common/thread_name.hpp"
#include "runtime/clock.hpp"
#include "runtime/core.hpp"
#include "runtime/heartbeat.hpp"
#include "runtime/intake.hpp"
#include "runtime/log_exceptions.hpp"
#include "runtime/settlement.hpp"
#include "runtime/simulated_container.hpp"
#include "runtime/worker_stage.hpp"

namespace sluice {
namespace asio = boost::asio;
using Clock = runtime::CoreClock;

namespace {
// Workers for a source whose preparation blocks (S3 payloads), when worker_threads
// is 0: such a source never prepares on the I/O thread.
constexpr int kWorkersForBlockingPrepare = 16;
// A flush cancelled at its deadline unwinds (its coroutines end) in at most this much.
constexpr std::chrono::milliseconds kFlushUnwind{200};

const ContainerOptions& checked(const ContainerOptions& options, const SourceFactory& factory,
                                const MessageHandler& single, const BatchHandler& batch) {
  validate(options);
  if (!factory)
    throw std::invalid_argument("container " + options.name +
                                ": no source (expected one from a factory such as "
                                "make_sqs_source)");
  const bool batch_mode = options.listener_mode == ListenerMode::batch;
  if (batch_mode ? !batch : !single)
    throw std::invalid_argument(std::string("container option listener_mode = ") +
                                (batch_mode ? "batch" : "single") + ": expected a " +
                                (batch_mode ? "batch" : "single-message") + " handler to match");
  return options;
}
}  // namespace

struct Container::Impl : std::enable_shared_from_this<Container::Impl> {
  Impl(ContainerOptions options, SourceFactory factory, MessageHandler single, BatchHandler batch)
      : core(checked(options, factory, single, batch)),
        source_factory(std::move(factory)),
        workers(core, settlement, {std::move(single), std::move(batch), {}}),
        settlement(core, workers),
        intake(core, settlement, workers),
        heartbeat(core, settlement) {}

  // ---------------------------------------------------------------- start
  void start() {
    std::lock_guard lock(lifecycle_mutex);
    if (state != State::idle)
      throw std::logic_error("container " + core.options.name + " already started");
    // spdlog makes its registry and default logger on first use: made here, before this
    // container's threads start, never on one of them while another logs.
    spdlog::default_logger_raw();
    core.owner = weak_from_this();
    core.source = source_factory(source_context());  // throws SourceError (configuration)
    // The settler shares the container's lifetime: a settlement keeps it alive.
    settlement.set_origin(core.source->message_source(),
                          std::shared_ptr<detail::Settler>(shared_from_this(), &settlement),
                          core.source->batch_positions());
    if (core.options.worker_threads > 0) workers.start(core.options.worker_threads);
    intake.start([this] { compose(); });
    // The I/O thread runs until stop(), even while a source has nothing pending.
    io_work.emplace(core.io.get_executor());
    io_thread = std::thread([this] {
      common::name_this_thread("sluice-io");
      core.io.run();
      io_thread_done = true;
    });
    state = State::running;
  }

  // The simulation's start: start() without the I/O thread (runtime/simulated_container.hpp).
  void start_simulated() {
    core.simulated = true;
    std::lock_guard lock(lifecycle_mutex);
    spdlog::default_logger_raw();
    core.owner = weak_from_this();
    core.source = source_factory(source_context());
    settlement.set_origin(core.source->message_source(),
                          std::shared_ptr<detail::Settler>(shared_from_this(), &settlement),
                          core.source->batch_positions());
    if (core.options.worker_threads > 0) workers.start(core.options.worker_threads);
    intake.start([this] { compose(); });
    state = State::running;
  }

  // The simulation's stop: stop()'s first steps, then its sequence on the polled context;
  // `done` gets how many handlers it left running.
  void begin_stop_simulated(std::chrono::milliseconds deadline_after,
                            std::function<void(int, bool)> done) {
    std::lock_guard lock(lifecycle_mutex);
    if (state != State::running) return;
    state = State::stopping;
    core.intake_closed = true;
    settlement.close();
    asio::co_spawn(core.io, stop_sequence(Clock::now() + deadline_after),
                   [this, done = std::move(done)](std::exception_ptr error, int still_running) {
                     if (error) still_running = finish_stop_by_hand();
                     state = State::stopped;
                     done(still_running, error != nullptr);
                   });
  }

  runtime::SourceContext source_context() {
    runtime::SourceContext context;
    context.executor = core.io.get_executor();
    context.name = core.options.name;
    context.max_in_flight = core.options.max_in_flight;
    context.positions = core.positions;
    std::weak_ptr<Impl> weak = weak_from_this();
    context.acks_settled = [weak](std::size_t confirmed, std::size_t abandoned,
                                  std::size_t from_ack) {
      if (auto self = weak.lock()) self->settlement.acks_settled(confirmed, abandoned, from_ack);
    };
    context.warning = [name = core.options.name](const std::string& what) {
      spdlog::warn("container={} event=source_warning detail=\"{}\"", name, what);
    };
    context.lease_lost = [weak](std::uint64_t lease) {
      if (auto self = weak.lock()) self->settlement.lease_lost(lease);
    };
    context.gauge = [weak](const std::string& name, double value) {
      if (auto self = weak.lock(); self && self->core.observer)
        self->core.observer->on_source_gauge(name, value);
    };
    return context;
  }

  // On the I/O thread, once the source is open: the stages from what it can do.
  void compose() {
    core.capabilities = core.source->capabilities();
    if (core.tracing)
      core.tracing->set_source(core.source->messaging_system(), core.source->destination_name());
    const auto& capabilities = core.capabilities;
    const bool batch = core.options.listener_mode == ListenerMode::batch;
    core.dispatch = capabilities.ordered_groups
                        ? runtime::make_ordered_groups(batch, core.options.ordered_group_runs)
                        : runtime::make_direct_dispatch(batch);
    settlement.permits().set_wake_threshold(capabilities.max_batch);
    if (core.options.worker_threads == 0) {
      if (capabilities.blocking_prepare)
        spdlog::info(
            "container={} event=workers_for_blocking_source workers={} (worker_threads is 0, "
            "but this source's preparation blocks: it never runs on the I/O thread)",
            core.options.name, kWorkersForBlockingPrepare);
      workers.start(capabilities.blocking_prepare ? kWorkersForBlockingPrepare : 0);
    }
    heartbeat.start();
  }

  // ---------------------------------------------------------------- stop
  void stop(std::chrono::milliseconds deadline_after) {
    std::lock_guard lock(lifecycle_mutex);
    if (state != State::running) return;
    state = State::stopping;
    const auto stop_started = Clock::now();
    const auto deadline = stop_started + deadline_after;
    // Seen by every thread at once: no more receives (a loop running handlers inline
    // stops between units), no more permits.
    core.intake_closed = true;
    settlement.close();
    // The rest is one sequence on the I/O thread. An inline handler stuck past the
    // deadline holds that thread: the sequence then does not finish in time, and the
    // stop goes on without it.
    auto sequence = asio::co_spawn(core.io, stop_sequence(deadline), asio::use_future);
    // Its final flush may end past deadline + kFinalFlushMin (it gets at least that much
    // from when it starts): once it has started, its own deadline counts, with a margin
    // for the cancelled flush to unwind.
    bool finished = sequence.wait_until(deadline + kFinalFlushMin) == std::future_status::ready;
    if (!finished && flush_until_ns.load() != 0)
      finished = sequence.wait_until(Clock::time_point(Clock::duration(flush_until_ns.load())) +
                                     kFlushUnwind) == std::future_status::ready;
    int still_running = 0;
    if (finished) {
      try {
        still_running = sequence.get();
      } catch (...) {  // a source's flush or stop_preparing threw: the stop goes on
        spdlog::error("container={} event=stop_sequence_failed error=\"{}\"", core.options.name,
                      runtime::describe_current_exception());
        finished = false;
      }
    }
    if (!finished) {
      // Something holds the I/O thread (an inline handler, a call that does not return),
      // or the sequence failed: what it would have done from there is done from here, so
      // that no worker waits on a hand-off or a payload forever.
      still_running = finish_stop_by_hand();
      spdlog::error("container={} event=stop_sequence_incomplete handlers_still_running={}",
                    core.options.name, still_running);
    }
    state = State::stopped;
    io_work.reset();
    core.io.stop();
    if (io_thread.joinable()) {
      // An inline handler stuck past the deadline holds the I/O thread: it is left
      // behind like a stuck worker (the destructor keeps the core alive for it).
      if (workers.runs_inline() && still_running > 0 && !io_thread_done) {
        io_thread.detach();
        io_thread_abandoned = true;
      } else {
        io_thread.join();
      }
    }
    if (still_running == 0) {
      workers.join();
    } else {
      spdlog::warn(
          "container={} event=stop_deadline handlers_still_running={} (their messages "
          "will be delivered again)",
          core.options.name, still_running);
    }
    const auto& c = core.counters;
    spdlog::info(
        "container={} event=stopped took_ms={} received={} acked={} failed={} released={} "
        "lost={}",
        core.options.name,
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - stop_started).count(),
        c.received.load(), c.acked.load(), c.failed.load(), c.released.load(), c.lost.load());
  }

  // What the stop sequence did not get to: nothing more is prepared or handed off.
  // Returns how many handlers still run.
  int finish_stop_by_hand() {
    core.draining = true;
    try {
      core.source->stop_preparing();
    } catch (...) {
    }
    workers.close();
    return workers.running();
  }

  // The stop, on the I/O thread, each step bounded by the deadline; returns how many
  // handlers still run.
  asio::awaitable<int> stop_sequence(Clock::time_point deadline) {
    // 1. Intake: the opening and open long polls are cancelled at once.
    intake.close();
    co_await intake.drain(deadline);
    // 2. Units handed off but not started are released; running handlers go on.
    core.draining = true;
    core.source->stop_preparing();
    // 3. Running handlers, and messages whose handler returned but which are settled
    //    later (manual acks, e.g. by a sink writer), have until the deadline.
    core.stopping = true;
    co_await workers.drain(deadline);
    co_await settlement.drain_started(deadline);
    const int still_running = workers.running();
    // 4. Everything held and not started goes back (hand-off queue, messages waiting
    //    behind their group).
    workers.close();
    settlement.release_unstarted();
    // 5. Rejects reach the dead-letter destination, acks and settlements are flushed,
    //    in what is left of the deadline but at least kFinalFlushMin: what is not sent
    //    by then is not lost, the queue delivers it again.
    const auto flush_deadline = std::max(deadline, Clock::now() + kFinalFlushMin);
    flush_until_ns = flush_deadline.time_since_epoch().count();
    if (!co_await settlement.drain_rejects(flush_deadline) ||
        !co_await flush_source(flush_deadline))
      spdlog::error(
          "container={} event=flush_timeout (acks not confirmed: those messages are delivered "
          "again)",
          core.options.name);
    // 6. The heartbeat: no more rounds; one in flight ends (its extends are harmless).
    heartbeat.close();
    co_await heartbeat.drain(flush_deadline);
    co_return still_running;
  }

  // The source's flush, cancelled at the deadline; false if it came first.
  asio::awaitable<bool> flush_source(Clock::time_point deadline) {
    runtime::CoreTimer timer(core.io, deadline);
    auto [order, error, timer_ec] =
        co_await asio::experimental::make_parallel_group(
            asio::co_spawn(core.io, core.source->flush(), asio::deferred),
            timer.async_wait(asio::deferred))
            .async_wait(asio::experimental::wait_for_one(), asio::use_awaitable);
    if (order[0] != 0) co_return false;
    if (error) {
      try {
        std::rethrow_exception(error);
      } catch (...) {
        spdlog::error("container={} event=flush_failed error=\"{}\"", core.options.name,
                      runtime::describe_current_exception());
      }
    }
    co_return true;
  }

  ContainerStats stats() const {
    const auto& c = core.counters;
    ContainerStats s;
    s.received = c.received.load();
    s.acked = c.acked.load();
    s.failed = c.failed.load();
    s.released = c.released.load();
    s.lost = c.lost.load();
    s.rejected = c.rejected.load();
    s.dead_lettered = c.dead_lettered.load();
    s.empty_receives = c.empty_receives.load();
    s.receive_errors = c.receive_errors.load();
    s.visibility_extensions = c.visibility_extensions.load();
    s.handler_calls = c.handler_calls.load();
    s.handoffs = c.handoffs.load();
    s.handoffs_shared = c.handoffs_shared.load();
    s.failed_acks = c.failed_acks.load();
    s.pending_acks = c.pending_acks.load();
    s.lease_remaining_min_ms = c.lease_remaining_min_ms.load();
    s.in_flight = c.in_flight.load();
    s.in_flight_peak = c.in_flight_peak.load();
    s.paused = core.paused.load();
    s.concurrent_receives = intake.active();
    s.concurrent_receives_peak = intake.peak();
    s.poll_latency_ms_avg = c.poll_latency.average_ms();
    s.handler_latency_ms_avg = c.handler_latency.average_ms();
    return s;
  }

  enum class State { idle, running, stopping, stopped };

  runtime::Core core;
  SourceFactory source_factory;
  runtime::WorkerStage workers;
  runtime::Settlement settlement;
  runtime::Intake intake;
  runtime::Heartbeat heartbeat;

  // When the stop sequence's final flush must end (steady clock, ns; 0: not there yet).
  std::atomic<Clock::rep> flush_until_ns{0};
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> io_work;
  std::thread io_thread;
  std::atomic<bool> io_thread_done{false};
  // The I/O thread was left running (an inline handler stuck past stop's deadline):
  // the core is never freed under it.
  bool io_thread_abandoned = false;

  std::mutex lifecycle_mutex;
  // Written under lifecycle_mutex by start() and stop(); read by running() from any
  // thread.
  std::atomic<State> state{State::idle};
  // Guards core.options' receive range against options()'s copy while
  // set_concurrent_receives changes it (on the I/O thread, the only writer).
  mutable std::mutex options_mutex;
};

Container::Container(ContainerOptions options, SourceFactory source, MessageHandler handler)
    : impl_(std::make_shared<Impl>(std::move(options), std::move(source), std::move(handler),
                                   BatchHandler{})) {}

Container::Container(ContainerOptions options, SourceFactory source, BatchHandler handler)
    : impl_(std::make_shared<Impl>(std::move(options), std::move(source), MessageHandler{},
                                   std::move(handler))) {}

Container::~Container() {
  stop();
  if (impl_->workers.running() == 0 && !impl_->io_thread_abandoned) {
    impl_->workers.join();
    return;
  }
  // Handlers that outlived the stop deadline: joining them could hang forever (a
  // handler stuck in a call). Their threads are abandoned, with the core kept alive
  // for them (their messages were not acked: the queue delivers them again).
  spdlog::warn("container={} event=handlers_abandoned handlers={}", impl_->core.options.name,
               impl_->workers.running());
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
  impl_->stop(impl_->core.options.shutdown_deadline);
}
bool Container::running() const {
  return impl_->state == Impl::State::running;
}
// Both are read without a lock by every thread of a running container: set before start.
void Container::set_observer(std::shared_ptr<ContainerObserver> observer) {
  if (impl_->state.load() != Impl::State::idle)
    throw std::logic_error("Container::set_observer: call it before start()");
  impl_->core.observer = std::move(observer);
}
void Container::set_tracer(std::shared_ptr<tracing::Tracer> tracer) {
  if (impl_->state.load() != Impl::State::idle)
    throw std::logic_error("Container::set_tracer: call it before start()");
  impl_->core.tracing =
      tracer ? std::make_unique<runtime::ContainerTracing>(std::move(tracer)) : nullptr;
}
void Container::set_position_store(std::shared_ptr<PositionStore> store) {
  if (impl_->state.load() != Impl::State::idle)
    throw std::logic_error("Container::set_position_store: call it before start()");
  impl_->core.positions = std::move(store);
}
void Container::set_unusable_handler(UnusableHandler handler) {
  if (impl_->state.load() != Impl::State::idle)
    throw std::logic_error("Container::set_unusable_handler: call it before start()");
  impl_->workers.set_unusable_handler(std::move(handler));
}
ContainerStats Container::stats() const {
  return impl_->stats();
}
ContainerOptions Container::options() const {
  std::lock_guard lock(impl_->options_mutex);
  return impl_->core.options;
}
const std::string& Container::name() const {
  return impl_->core.options.name;
}

void Container::pause() {
  impl_->core.paused = true;
  auto impl = impl_;
  asio::post(impl->core.io, [impl] { impl->intake.pause(); });
}
void Container::resume() {
  impl_->core.paused = false;
  auto impl = impl_;
  asio::post(impl->core.io, [impl] { impl->intake.resume(); });
}
bool Container::paused() const {
  return impl_->core.paused.load();
}

void Container::set_concurrent_receives(int min, int max) {
  if (min < 1 || max < min)
    throw std::invalid_argument("container concurrent receives " + std::to_string(min) + "-" +
                                std::to_string(max) + ": expected 1 <= min <= max");
  auto impl = impl_;
  asio::post(impl->core.io, [impl, min, max] {
    auto& core = impl->core;
    if (core.dispatch && core.capabilities.push) {  // the source scales its consumers
      core.source->set_concurrency(min, max);
      return;
    }
    {
      std::lock_guard lock(impl->options_mutex);
      core.options.min_concurrent_receives = min;
      core.options.max_concurrent_receives = max;
    }
    impl->intake.set_range(min, max);
  });
}

}  // namespace sluice

namespace sluice::runtime {

SimulatedContainer::SimulatedContainer(ContainerOptions options, SourceFactory source,
                                       BatchHandler handler)
    : container_(std::move(options), std::move(source), std::move(handler)) {}
SimulatedContainer::SimulatedContainer(ContainerOptions options, SourceFactory source,
                                       MessageHandler handler)
    : container_(std::move(options), std::move(source), std::move(handler)) {}
SimulatedContainer::~SimulatedContainer() {
  // Never stopped: stopped here, on virtual time (Container's own stop waits on the real
  // clock for a deadline the virtual one set).
  if (container_.impl_->state.load() != Container::Impl::State::running) return;
  begin_stop(std::chrono::milliseconds(0));
  VirtualClock* clock = clock_detail::virtual_clock();
  for (int i = 0; i < 100000 && !stop_finished_; ++i)
    if (io().poll() == 0) {
      const auto next = clock ? clock->next_deadline() : std::nullopt;
      if (!next) break;
      clock->advance_to(*next);
    }
}

boost::asio::io_context& SimulatedContainer::io() {
  return container_.impl_->core.io;
}
void SimulatedContainer::start() {
  container_.impl_->start_simulated();
}
void SimulatedContainer::begin_stop(std::chrono::milliseconds deadline) {
  container_.impl_->begin_stop_simulated(deadline, [this](int still_running, bool failed) {
    still_running_ = still_running;
    stop_failed_ = failed;
    stop_finished_ = true;
  });
}
int SimulatedContainer::permits_available() const {
  return container_.impl_->settlement.permits().available();
}

}  // namespace sluice::runtime
