#pragma once
// Runs a coroutine to completion on a private io_context and returns its result.
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>

namespace sluice::test {

template <class T>
T run(boost::asio::io_context& io, boost::asio::awaitable<T> task) {
  auto future = boost::asio::co_spawn(io, std::move(task), boost::asio::use_future);
  io.restart();
  io.run();
  return future.get();
}

template <class Factory>
auto run(Factory&& make_task) {
  boost::asio::io_context io;
  return run(io, make_task(io.get_executor()));
}

}  // namespace sluice::test
