// The settlement batcher (pure logic on an io_context): full batches go at once,
// partial ones on the timer, everything on drain(); eager mode (FIFO deletes) sends a
// partial batch at once when nothing is in flight.
#include "runtime/batcher.hpp"

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>

using namespace sluice;
using namespace std::chrono_literals;

namespace {
struct Sent {
  std::vector<std::vector<int>> batches;
};
std::shared_ptr<runtime::Batcher<int>> make(boost::asio::io_context& io, Sent& sent) {
  return std::make_shared<runtime::Batcher<int>>(
      io.get_executor(), 10, std::chrono::minutes(10),
      [&sent](std::vector<int> batch) -> boost::asio::awaitable<void> {
        sent.batches.push_back(std::move(batch));
        co_return;
      });
}
}  // namespace

TEST(Batcher, FullBatchesGoAtOncePartialOnesWaitForTheTimerOrDrain) {
  boost::asio::io_context io;
  Sent sent;
  auto batcher = make(io, sent);
  batcher->start();
  for (int i = 0; i < 13; ++i) batcher->add(i);
  io.run_for(50ms);
  ASSERT_EQ(sent.batches.size(), 1u) << "the 3 left wait for the 10 min timer";
  EXPECT_EQ(sent.batches[0].size(), 10u);
  boost::asio::co_spawn(io, batcher->drain(), boost::asio::detached);
  io.restart();
  io.run_for(50ms);
  ASSERT_EQ(sent.batches.size(), 2u) << "drain sends what is left";
  EXPECT_EQ(sent.batches[1], (std::vector<int>{10, 11, 12}));
}

TEST(Batcher, EagerModeSendsAPartialBatchAtOnce) {
  boost::asio::io_context io;
  Sent sent;
  auto batcher = make(io, sent);
  batcher->set_eager(true);
  batcher->start();
  batcher->add(1);
  io.run_for(50ms);
  ASSERT_EQ(sent.batches.size(), 1u) << "not held for the 10 min timer";
  EXPECT_EQ(sent.batches[0], std::vector<int>{1});
  boost::asio::co_spawn(io, batcher->drain(), boost::asio::detached);
  io.restart();
  io.run_for(50ms);
}
