#include "runtime/permits.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include "runtime/clock.hpp"
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <tuple>

namespace sluice::runtime {
namespace asio = boost::asio;
using namespace boost::asio::experimental::awaitable_operators;

asio::awaitable<int> Permits::acquire_up_to(int max) {
  bool first = true, lingered = false;
  for (;;) {
    std::shared_ptr<Signal> signal;
    bool timed = false;
    {
      std::lock_guard lock(mutex_);
      if (closed_) co_return 0;
      if (available_ > 0 && (first || lingered || available_ >= wake_threshold_)) {
        const int taken = std::min(max, available_);
        available_ -= taken;
        co_return taken;
      }
      first = false;
      signal = std::make_shared<Signal>(co_await asio::this_coro::executor, 1);
      // None free: sleep until one is (no timer). Some free, fewer than a poll's worth:
      // wait for the threshold, at most `linger`.
      timed = available_ > 0;
      (timed ? waiters_ : empty_waiters_).push_back(signal);
    }
    boost::system::error_code ec;
    if (timed) {
      CoreTimer timer(co_await asio::this_coro::executor, linger);
      auto woken = co_await (signal->async_receive(asio::as_tuple(asio::use_awaitable)) ||
                             timer.async_wait(asio::as_tuple(asio::use_awaitable)));
      ec = woken.index() == 0 ? std::get<0>(std::get<0>(woken)) : std::get<0>(std::get<1>(woken));
      if (woken.index() == 1 && !ec) {  // lingered long enough: take what is free
        std::lock_guard lock(mutex_);
        std::erase(waiters_, signal);
        lingered = true;
        continue;
      }
    } else {
      std::tie(ec) = co_await signal->async_receive(asio::as_tuple(asio::use_awaitable));
    }
    if (ec == asio::error::operation_aborted ||
        ec == asio::experimental::error::channel_cancelled) {
      std::lock_guard lock(mutex_);
      std::erase(waiters_, signal);
      std::erase(empty_waiters_, signal);
      throw boost::system::system_error(asio::error::operation_aborted);
    }
  }
}

void Permits::release(int count) {
  if (count <= 0) return;
  std::lock_guard lock(mutex_);
  available_ += count;
  if (available_ >= wake_threshold_) wake(waiters_);
  wake(empty_waiters_);
}

void Permits::close() {
  std::lock_guard lock(mutex_);
  closed_ = true;
  wake(waiters_);
  wake(empty_waiters_);
}

int Permits::available() const {
  std::lock_guard lock(mutex_);
  return available_;
}

void Permits::wake(std::vector<std::shared_ptr<Signal>>& list) {
  for (auto& w : list) w->try_send(boost::system::error_code{});
  list.clear();
}

}  // namespace sluice::runtime
