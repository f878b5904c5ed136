#include "runtime/heartbeat.hpp"

#include <spdlog/spdlog.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "runtime/log_exceptions.hpp"
#include "runtime/settlement.hpp"

namespace sluice::runtime {
namespace asio = boost::asio;

Heartbeat::Heartbeat(Core& core, Settlement& settlement)
    : core_(core), settlement_(settlement), timer_(core.io), ended_(core.io.get_executor()) {}

void Heartbeat::start() {
  const auto& options = core_.options;
  const auto lease = core_.capabilities.lease;
  if (!options.heartbeat || !core_.capabilities.extendable || lease.count() <= 0) return;
  auto interval = options.heartbeat_interval.count() > 0 ? options.heartbeat_interval : lease / 3;
  if (interval >= lease / 2) {
    spdlog::warn(
        "container={} event=heartbeat_interval_too_long heartbeat_interval_ms={} lease_ms={} "
        "using_ms={}",
        options.name, interval.count(), lease.count(), (lease / 3).count());
    interval = lease / 3;
  }
  running_ = true;
  asio::co_spawn(core_.io, run(std::max(interval, std::chrono::milliseconds(1))),
                 [this, name = options.name](std::exception_ptr error) {
                   running_ = false;
                   ended_.notify();
                   log_if_thrown(name + " heartbeat")(error);
                 });
}

void Heartbeat::close() {
  closed_ = true;
  timer_.cancel();
}

asio::awaitable<bool> Heartbeat::drain(CoreClock::time_point deadline) {
  co_return co_await ended_.wait_until(deadline, [this] { return !running_; });
}

asio::awaitable<void> Heartbeat::run(std::chrono::milliseconds interval) {
  const std::int64_t threshold_ms = core_.capabilities.lease.count() / 2;
  while (!closed_) {
    timer_.expires_after(interval);
    auto [ec] = co_await timer_.async_wait(asio::as_tuple(asio::use_awaitable));
    if (ec || closed_) co_return;
    std::int64_t remaining_min = kNoLeaseDue;
    auto due = settlement_.due_for_extension(threshold_ms, remaining_min);
    // How close held messages came to being delivered again (a starved heartbeat
    // shows as this falling towards 0).
    core_.counters.lease_remaining_min_ms = remaining_min;
    if (due.empty()) continue;
    try {
      const auto n = co_await core_.source->extend(std::move(due));
      core_.counters.visibility_extensions.fetch_add(n, std::memory_order_relaxed);
    } catch (const SourceError& e) {
      if (e.kind() == SourceErrorKind::cancelled) co_return;
      spdlog::warn("container={} event=heartbeat_failed error=\"{}\"", core_.options.name,
                   e.what());
    }
  }
}

}  // namespace sluice::runtime
