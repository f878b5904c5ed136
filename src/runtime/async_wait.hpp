#pragma once
// Waiting on an executor, without polling, for what another thread does. Asio has no
// awaitable condition variable; its idiom is a timer that never expires: the wait is
// the timer's, the wake-up is a cancel posted to the executor, so it runs in order with
// the waiter and no wake-up is lost between its check and its wait.

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <boost/asio/post.hpp>
#include "runtime/clock.hpp"
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <exception>
#include <memory>
#include <vector>

namespace sluice::runtime {

// One coroutine at a time waits, on the executor, until a condition that other
// threads change holds. Whoever changes it calls notify() afterwards, from any thread.
class AsyncCondition {
 public:
  using Clock = CoreClock;
  explicit AsyncCondition(boost::asio::any_io_executor executor)
      : timer_(std::make_shared<CoreTimer>(std::move(executor))) {}

  void notify() const {
    boost::asio::post(timer_->get_executor(), [timer = timer_] { timer->cancel(); });
  }

  // True once `ready()` holds; false if the deadline came first.
  template <class Ready>
  boost::asio::awaitable<bool> wait_until(Clock::time_point deadline, Ready ready) {
    while (!ready()) {
      if (Clock::now() >= deadline) co_return false;
      timer_->expires_at(deadline);
      auto [ec] = co_await timer_->async_wait(boost::asio::as_tuple(boost::asio::use_awaitable));
      if (!ec) co_return ready();  // the deadline; otherwise a notify: look again
    }
    co_return true;
  }

 private:
  std::shared_ptr<CoreTimer> timer_;  // shared with posted notifies
};

// A result another thread hands to a coroutine on the executor: set_value() or
// set_exception() once, from any thread; wait() on the executor returns it.
class Completion : public std::enable_shared_from_this<Completion> {
 public:
  explicit Completion(boost::asio::any_io_executor executor)
      : timer_(std::move(executor), CoreTimer::time_point::max()) {}
  void set_value() { finish(nullptr); }
  void set_exception(std::exception_ptr error) { finish(std::move(error)); }
  // True once set (rethrowing its exception); false when the waiting coroutine was
  // cancelled first.
  boost::asio::awaitable<bool> wait() {
    if (!done_) co_await timer_.async_wait(boost::asio::as_tuple(boost::asio::use_awaitable));
    if (!done_) co_return false;
    if (error_) std::rethrow_exception(error_);
    co_return true;
  }

 private:
  void finish(std::exception_ptr error) {
    boost::asio::post(timer_.get_executor(), [self = shared_from_this(), error = std::move(error)] {
      self->done_ = true;
      self->error_ = error;
      self->timer_.cancel();
    });
  }
  CoreTimer timer_;
  bool done_ = false;         // the executor's
  std::exception_ptr error_;  // the executor's
};

// Runs the coroutines concurrently on `executor` and waits for every one of them;
// returns what each threw (null: it returned), in the order given. Cancelling the
// waiting coroutine cancels them all.
inline boost::asio::awaitable<std::vector<std::exception_ptr>> run_all(
    boost::asio::any_io_executor executor, std::vector<boost::asio::awaitable<void>> tasks) {
  using Op = decltype(boost::asio::co_spawn(executor, std::declval<boost::asio::awaitable<void>>(),
                                            boost::asio::deferred));
  std::vector<Op> ops;
  ops.reserve(tasks.size());
  for (auto& task : tasks)
    ops.push_back(boost::asio::co_spawn(executor, std::move(task), boost::asio::deferred));
  if (ops.empty()) co_return std::vector<std::exception_ptr>{};
  auto [order, errors] =
      co_await boost::asio::experimental::make_parallel_group(std::move(ops))
          .async_wait(boost::asio::experimental::wait_for_all(), boost::asio::use_awaitable);
  co_return std::move(errors);
}

}  // namespace sluice::runtime
