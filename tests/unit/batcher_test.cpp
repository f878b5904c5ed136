// The settlement batcher (pure logic on an io_context): full batches go at once,
// partial ones on the timer, everything on drain(); eager mode (FIFO deletes) sends a
// partial batch at once when nothing is in flight.
#include "runtime/batcher.hpp"

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>

#include "runtime/clock.hpp"

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
// The batcher on the core's virtual clock (runtime/clock.hpp): time moves only when the
// test says, so "waits for the timer" is a fact, not a window.
struct VirtualTime {
  runtime::VirtualClock clock{runtime::CoreClock::time_point(std::chrono::hours(1)), 1};
  runtime::ScopedVirtualClock installed{clock};
  boost::asio::io_context io;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work{io.get_executor()};
  ~VirtualTime() { clock.drop_waits(); }  // before the context they would run on goes
};
}  // namespace

TEST(Batcher, FullBatchesGoAtOncePartialOnesWaitForTheTimerOrDrain) {
  VirtualTime time;
  Sent sent;
  auto batcher = make(time.io, sent);
  batcher->start();
  for (int i = 0; i < 13; ++i) batcher->add(i);
  time.io.poll();
  ASSERT_EQ(sent.batches.size(), 1u) << "the 3 left wait for the 10 min timer";
  EXPECT_EQ(sent.batches[0].size(), 10u);
  boost::asio::co_spawn(time.io, batcher->drain(), boost::asio::detached);
  time.io.poll();
  ASSERT_EQ(sent.batches.size(), 2u) << "drain sends what is left";
  EXPECT_EQ(sent.batches[1], (std::vector<int>{10, 11, 12}));
}

TEST(Batcher, APartialBatchGoesWhenItsTimerComes) {
  VirtualTime time;
  Sent sent;
  auto batcher = make(time.io, sent);
  batcher->start();
  for (int i = 0; i < 3; ++i) batcher->add(i);
  time.io.poll();
  ASSERT_TRUE(sent.batches.empty()) << "held for the timer";
  const auto next = time.clock.next_deadline();
  ASSERT_TRUE(next.has_value()) << "a timer waits";
  EXPECT_LE(*next - time.clock.now(), std::chrono::minutes(10));
  time.clock.advance_to(*next);
  time.io.poll();
  ASSERT_EQ(sent.batches.size(), 1u) << "sent when the timer came";
  EXPECT_EQ(sent.batches[0], (std::vector<int>{0, 1, 2}));
}

TEST(Batcher, EagerModeSendsAPartialBatchAtOnce) {
  VirtualTime time;
  Sent sent;
  auto batcher = make(time.io, sent);
  batcher->set_eager(true);
  batcher->start();
  batcher->add(1);
  time.io.poll();
  ASSERT_EQ(sent.batches.size(), 1u) << "not held for the 10 min timer";
  EXPECT_EQ(sent.batches[0], std::vector<int>{1});
  boost::asio::co_spawn(time.io, batcher->drain(), boost::asio::detached);
  time.io.poll();
}
