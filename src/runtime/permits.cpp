#include "runtime/permits.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace sluice::runtime {
namespace asio = boost::asio;
using namespace boost::asio::experimental::awaitable_operators;

asio::awaitable<int> Permits::acquire_up_to(int max) {
  for (;;) {
    std::shared_ptr<Signal> signal;
    {
      std::lock_guard lock(mutex_);
      if (closed_) co_return 0;
      if (available_ > 0) {
        const int taken = std::min(max, available_);
        available_ -= taken;
        co_return taken;
      }
      signal = std::make_shared<Signal>(co_await asio::this_coro::executor, 1);
      waiters_.push_back(signal);
    }
    // Woken at the threshold, or after `linger` to take what is free by then.
    asio::steady_timer timer(co_await asio::this_coro::executor, linger);
    auto woken = co_await (signal->async_receive(asio::as_tuple(asio::use_awaitable)) ||
                           timer.async_wait(asio::as_tuple(asio::use_awaitable)));
    const auto ec =
        woken.index() == 0 ? std::get<0>(std::get<0>(woken)) : std::get<0>(std::get<1>(woken));
    if (woken.index() == 1 && !ec) {  // lingered: no longer a waiter; loop and look
      std::lock_guard lock(mutex_);
      std::erase(waiters_, signal);
      continue;
    }
    if (ec == asio::error::operation_aborted ||
        ec == asio::experimental::error::channel_cancelled) {
      std::lock_guard lock(mutex_);
      std::erase(waiters_, signal);
      throw boost::system::system_error(asio::error::operation_aborted);
    }
  }
}

void Permits::release(int count) {
  if (count <= 0) return;
  std::lock_guard lock(mutex_);
  available_ += count;
  if (available_ >= wake_threshold_ && !waiters_.empty()) wake_locked();
}

void Permits::close() {
  std::lock_guard lock(mutex_);
  closed_ = true;
  wake_locked();
}

int Permits::available() const {
  std::lock_guard lock(mutex_);
  return available_;
}

void Permits::wake_locked() {
  for (auto& w : waiters_) w->try_send(boost::system::error_code{});
  waiters_.clear();
}

}  // namespace sluice::runtime
