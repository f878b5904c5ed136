#include "runtime/clock.hpp"

#include <boost/asio/append.hpp>
#include <boost/asio/post.hpp>
#include <memory>
#include <stdexcept>
#include <vector>

namespace sluice::runtime {

namespace clock_detail {
std::atomic<VirtualClock*> installed{nullptr};
}  // namespace clock_detail

std::optional<CoreClock::time_point> VirtualClock::next_deadline() const {
  std::lock_guard lock(mutex_);
  if (waits_.empty() || waits_.begin()->first.first == CoreClock::time_point::max())
    return std::nullopt;
  return waits_.begin()->first.first;
}

void VirtualClock::advance_to(CoreClock::time_point t) {
  std::vector<Wait> due;
  {
    std::lock_guard lock(mutex_);
    if (t > now_) now_ = t;
    while (!waits_.empty() && waits_.begin()->first.first <= now_) {
      due.push_back(std::move(waits_.begin()->second));
      waits_.erase(waits_.begin());
    }
  }
  for (auto& wait : due) complete(std::move(wait), {});
}

void VirtualClock::wait(const void* timer, CoreClock::time_point deadline,
                        boost::asio::any_io_executor executor, WaitHandler handler) {
  auto slot = handler.get_cancellation_slot();
  Key key;
  {
    std::lock_guard lock(mutex_);
    if (deadline <= now_) {  // due already: completes at once, as Asio's would
      complete(Wait{timer, std::move(executor), std::move(handler)}, {});
      return;
    }
    key = Key{deadline, next_order_++};
    waits_.emplace(key, Wait{timer, std::move(executor), std::move(handler)});
  }
  // A wait cancelled on its own (a coroutine's stop, the loser of a parallel group).
  if (slot.is_connected())
    slot.assign([this, key](boost::asio::cancellation_type type) {
      // Asio's timers act on terminal, partial and total cancellation alike.
      if ((type &
           (boost::asio::cancellation_type::terminal | boost::asio::cancellation_type::partial |
            boost::asio::cancellation_type::total)) != boost::asio::cancellation_type::none)
        cancel_one(key);
    });
}

void VirtualClock::drop_waits() {
  std::map<Key, Wait> dropped;
  {
    std::lock_guard lock(mutex_);
    dropped.swap(waits_);
  }
  // Destroyed here, outside the lock: a coroutine's timers cancel themselves as it goes.
}

std::size_t VirtualClock::cancel(const void* timer) {
  std::vector<Wait> cancelled;
  {
    std::lock_guard lock(mutex_);
    for (auto it = waits_.begin(); it != waits_.end();)
      if (it->second.timer == timer) {
        cancelled.push_back(std::move(it->second));
        it = waits_.erase(it);
      } else {
        ++it;
      }
  }
  for (auto& wait : cancelled) complete(std::move(wait), boost::asio::error::operation_aborted);
  return cancelled.size();
}

void VirtualClock::cancel_one(Key key) {
  std::optional<Wait> cancelled;
  {
    std::lock_guard lock(mutex_);
    const auto it = waits_.find(key);
    if (it == waits_.end()) return;
    cancelled.emplace(std::move(it->second));
    waits_.erase(it);
  }
  // Inside the slot's emit: the slot is left as it is (clearing it would destroy the
  // handler that runs now); whoever uses it next replaces it.
  complete(std::move(*cancelled), boost::asio::error::operation_aborted, false);
}

void VirtualClock::complete(Wait wait, boost::system::error_code ec, bool clear_slot) {
  // Its cancellation slot is free again once the wait is done.
  if (clear_slot)
    if (auto slot = wait.handler.get_cancellation_slot(); slot.is_connected()) slot.clear();
  boost::asio::post(wait.executor, boost::asio::append(std::move(wait.handler), ec));
}

ScopedVirtualClock::ScopedVirtualClock(VirtualClock& clock) {
  VirtualClock* expected = nullptr;
  if (!clock_detail::installed.compare_exchange_strong(expected, &clock))
    throw std::logic_error("a virtual clock is installed already");
}

ScopedVirtualClock::~ScopedVirtualClock() {
  clock_detail::installed.store(nullptr);
}

}  // namespace sluice::runtime
