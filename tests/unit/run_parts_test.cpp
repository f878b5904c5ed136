// The parts `sluice run` and the container core are composed of, alone.
#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#include <thread>

#include "app/drain_detector.hpp"
#include "observe/metrics.hpp"
#include "runtime/async_wait.hpp"

namespace sluice {
namespace {
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

TEST(DrainDetector, DrainedOnlyAfterAnUnbrokenIdleStretch) {
  app::DrainDetector drain(2000ms);
  const auto t0 = Clock::now();
  const app::DrainInputs idle{};
  EXPECT_FALSE(drain.observe(idle, t0));
  EXPECT_FALSE(drain.observe(idle, t0 + 1999ms));
  EXPECT_EQ(drain.idle_since(), t0);
  EXPECT_TRUE(drain.observe(idle, t0 + 2000ms));
  // One busy reading starts the stretch again.
  app::DrainInputs busy{};
  busy.writer_queued = 1;
  EXPECT_FALSE(drain.observe(busy, t0 + 2100ms));
  EXPECT_EQ(drain.idle_since(), Clock::time_point{});
  EXPECT_FALSE(drain.observe(idle, t0 + 2200ms));
  EXPECT_TRUE(drain.observe(idle, t0 + 4200ms));
}

TEST(DrainDetector, EveryPlaceAMessageCanWaitKeepsItBusy) {
  const auto t0 = Clock::now();
  auto busy_with = [&](auto set) {
    app::DrainDetector drain(0ms);
    app::DrainInputs in{};
    set(in);
    return !drain.observe(in, t0);
  };
  EXPECT_FALSE(busy_with([](app::DrainInputs&) {}));
  EXPECT_TRUE(busy_with([](app::DrainInputs& in) { in.ready = 1; }));
  EXPECT_TRUE(busy_with([](app::DrainInputs& in) { in.queue_in_flight = 3; }));
  EXPECT_TRUE(busy_with([](app::DrainInputs& in) { in.held = 1; }));
  EXPECT_TRUE(busy_with([](app::DrainInputs& in) { in.pending_acks = 1; }));
  EXPECT_TRUE(busy_with([](app::DrainInputs& in) { in.source_unacknowledged = 2; }));
  EXPECT_TRUE(busy_with([](app::DrainInputs& in) { in.writer_queued = 5; }));
  // A queue that does not report its in-flight count (-1) is judged by the rest.
  EXPECT_FALSE(busy_with([](app::DrainInputs& in) { in.queue_in_flight = -1; }));
}

boost::asio::awaitable<bool> wait_for_nothing(boost::asio::any_io_executor executor) {
  runtime::AsyncCondition never(executor);
  co_return co_await never.wait_until(Clock::now() + 50ms, [] { return false; });
}

// Another thread's change, then notify(): the waiting coroutine wakes well before its
// deadline (no poll), and a wait whose condition never holds ends at its deadline.
TEST(AsyncCondition, WakesOnNotifyFromAnotherThreadAndEndsAtTheDeadline) {
  boost::asio::io_context io;
  runtime::AsyncCondition condition(io.get_executor());
  std::atomic<bool> ready{false};
  const auto deadline = Clock::now() + 30s;
  auto woke = boost::asio::co_spawn(
      io, condition.wait_until(deadline, [&] { return ready.load(); }), boost::asio::use_future);
  auto timed_out =
      boost::asio::co_spawn(io, wait_for_nothing(io.get_executor()), boost::asio::use_future);
  std::thread io_thread([&] { io.run(); });
  std::this_thread::sleep_for(100ms);  // the waiter is suspended by now (no event says so)
  ready = true;
  condition.notify();
  ASSERT_EQ(woke.wait_for(10s), std::future_status::ready);
  EXPECT_TRUE(woke.get());
  EXPECT_LT(Clock::now(), deadline - 15s);
  ASSERT_EQ(timed_out.wait_for(10s), std::future_status::ready);
  EXPECT_FALSE(timed_out.get());
  io_thread.join();
}

TEST(AsyncCondition, ACompletionCarriesItsExceptionAcrossThreads) {
  boost::asio::io_context io;
  auto done = std::make_shared<runtime::Completion>(io.get_executor());
  auto result = boost::asio::co_spawn(io, done->wait(), boost::asio::use_future);
  std::thread io_thread([&] { io.run(); });
  std::thread([done] {
    done->set_exception(std::make_exception_ptr(std::runtime_error("boom")));
  }).join();
  ASSERT_EQ(result.wait_for(10s), std::future_status::ready);
  EXPECT_THROW(result.get(), std::runtime_error);
  io_thread.join();
}

}  // namespace
}  // namespace sluice

// One metrics server for several pipelines: one family per name (a second HELP line for
// a name is an error to Prometheus), each series labelled with its pipeline.
TEST(RunParts, SeveralPipelinesShareOneExpositionWithAPipelineLabel) {
  sluice::app::PipelineMetrics a, b;
  a.set_pipeline("orders");
  b.set_pipeline("inventory");
  a.record_rejected("malformed");
  b.record_filtered();
  b.record_filtered();
  const std::string text = sluice::app::serialize_all({&a, &b});
  EXPECT_NE(text.find("sluice_messages_rejected_total{pipeline=\"orders\",reason=\"malformed\"} 1"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("sluice_filtered_total{pipeline=\"inventory\"} 2"), std::string::npos);
  EXPECT_NE(text.find("sluice_filtered_total{pipeline=\"orders\"} 0"), std::string::npos);
  std::size_t help_lines = 0;
  for (std::size_t at = 0;
       (at = text.find("# HELP sluice_filtered_total ", at)) != std::string::npos; ++at)
    ++help_lines;
  EXPECT_EQ(help_lines, 1u);
}
