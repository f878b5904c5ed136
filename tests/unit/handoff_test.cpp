// How the worker stage groups messages per hand-off, on the core's virtual clock
// (runtime/clock.hpp): a handler's duration is what the test says it is, not what a
// loaded machine made of it, so the grouping is a fact of the code, in every build.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>

#include "runtime/clock.hpp"
#include "runtime/simulated_container.hpp"
#include "sluice/container.hpp"
#include "support/fake_source.hpp"

using namespace sluice;
using namespace std::chrono_literals;

namespace {

constexpr int kTotal = 400;

// Polls the container's context until `done`; with nothing ready, moves the virtual
// clock to the next deadline, or else runs the next handler the context gets: the fake
// queue's empty-poll timer (a real one, only once the queue is empty).
template <typename Done>
bool drive(runtime::SimulatedContainer& container, runtime::VirtualClock& clock, Done done) {
  for (int step = 0; step < 1'000'000; ++step) {
    if (done()) return true;
    if (container.io().poll() > 0) continue;
    if (const auto next = clock.next_deadline())
      clock.advance_to(*next);
    else
      container.io().run_one();
  }
  return false;
}

// 400 messages, 10 per receive, 4 workers, each call taking `call` of virtual time.
ContainerStats run_with_calls_of(std::chrono::nanoseconds call) {
  runtime::VirtualClock clock{runtime::CoreClock::time_point(1h), 7};
  runtime::ScopedVirtualClock installed{clock};
  auto queue = std::make_shared<test::FakeQueue>();
  queue->max_batch = 10;
  for (int i = 0; i < kTotal; ++i) queue->push("m" + std::to_string(i));
  ContainerOptions options;
  options.name = "handoff";
  options.ack_mode = AckMode::on_success;
  options.max_in_flight = 40;
  options.worker_threads = 4;
  int done = 0;
  runtime::SimulatedContainer container(options, test::fake_source(queue),
                                        MessageHandler([&](Message&) {
                                          clock.advance_to(clock.now() + call);
                                          ++done;
                                        }));
  container.start();
  EXPECT_TRUE(drive(container, clock, [&] { return done == kTotal; })) << "not all handled";
  container.begin_stop(0ms);
  EXPECT_TRUE(drive(container, clock, [&] { return container.stop_finished(); }));
  EXPECT_EQ(queue->count(queue->acked), static_cast<std::size_t>(kTotal));
  const auto stats = container.stats();
  clock.drop_waits();  // before the context they would run on goes
  return stats;
}

}  // namespace

// Timed as fast (1 us, under the 50 us budget), a receive's messages go out together:
// about one hand-off (one wake-up) per receive of 10, not one per message. The first
// 40 (max_in_flight) are received before any call is timed, and go one each.
TEST(HandOff, AFastHandlerGetsAReceivesMessagesInOneHandOff) {
  const auto fast = run_with_calls_of(1us);
  EXPECT_EQ(fast.handler_calls, static_cast<std::uint64_t>(kTotal));
  EXPECT_LE(fast.handoffs, static_cast<std::uint64_t>(40 + (kTotal - 40) / 10 + 4))
      << "fast handlers still get one message per hand-off";
  EXPECT_GE(fast.handoffs, static_cast<std::uint64_t>(kTotal / 10)) << "at most a receive each";
  EXPECT_EQ(run_with_calls_of(1us).handoffs, fast.handoffs) << "a schedule replays exactly";
}

// Timed as slow (2 ms), each message is a hand-off of its own, so that none waits
// behind another's call.
TEST(HandOff, ASlowHandlerGetsOneMessagePerHandOff) {
  const auto slow = run_with_calls_of(2ms);
  EXPECT_EQ(slow.handler_calls, static_cast<std::uint64_t>(kTotal));
  EXPECT_EQ(slow.handoffs, static_cast<std::uint64_t>(kTotal));
}

// Between the two: 25 us fits two calls in the budget. Some go alone: those received
// before any call was timed, and the last of a receive of an odd number.
TEST(HandOff, AHandOffCarriesAsManyCallsAsTheBudgetHolds) {
  const auto between = run_with_calls_of(25us);
  EXPECT_GE(between.handoffs, static_cast<std::uint64_t>(kTotal / 2));
  EXPECT_LT(between.handoffs, static_cast<std::uint64_t>(kTotal * 3 / 5));
}
