// `sluice run`'s stop: a signal wakes the main loop at once (no polled flag), and the
// stop's steps leave the watchdog its share of the one deadline.
#include "app/shutdown.hpp"

#include <gtest/gtest.h>
#include <signal.h>

#include <thread>

#include "support/work.hpp"

using namespace sluice;
using namespace std::chrono_literals;

namespace {

int g_previous_handler_calls = 0;
void previous_handler(int) {
  ++g_previous_handler_calls;
}

}  // namespace

TEST(StopSignal, ASignalEndsTheWaitAtOnceAndThePreviousHandlerComesBack) {
  struct sigaction previous {};
  previous.sa_handler = previous_handler;
  struct sigaction saved {};
  sigaction(SIGTERM, &previous, &saved);
  {
    const app::StopSignal stop;
    EXPECT_FALSE(stop.requested());
    EXPECT_FALSE(stop.wait_for(10ms)) << "no signal yet";
    std::thread signaller([] {
      std::this_thread::sleep_for(50ms);  // the signal comes while the stop waits for it
      kill(getpid(), SIGTERM);
    });
    const auto started = std::chrono::steady_clock::now();
    // An hour's wait: only the signal can end it.
    EXPECT_TRUE(stop.wait_for(std::chrono::hours(1)));
    signaller.join();
    EXPECT_LT(std::chrono::steady_clock::now() - started, 30s);
    EXPECT_EQ(stop.number(), SIGTERM);
    EXPECT_TRUE(stop.wait_for(std::chrono::hours(1))) << "a signal that came stays";
    EXPECT_EQ(g_previous_handler_calls, 0) << "ours had it";
    EXPECT_THROW(app::StopSignal{}, std::logic_error) << "one at a time";
  }
  raise(SIGTERM);
  EXPECT_EQ(g_previous_handler_calls, 1) << "the handler before it is back";
  sigaction(SIGTERM, &saved, nullptr);
  const app::StopSignal again;  // a new run starts without the old signal
  EXPECT_FALSE(again.requested());
  raise(SIGINT);
  EXPECT_TRUE(again.wait_for(1s));
  EXPECT_EQ(again.number(), SIGINT);
}

TEST(ShutdownSupervisor, TheStepsLeaveTheWatchdogAFifthOfTheDeadlineBetween400MsAnd2S) {
  EXPECT_EQ(app::ShutdownSupervisor::reserve(30s), 2s);
  EXPECT_EQ(app::ShutdownSupervisor::reserve(5s), 1s);
  EXPECT_EQ(app::ShutdownSupervisor::reserve(3s), 600ms);
  EXPECT_EQ(app::ShutdownSupervisor::reserve(1s), 400ms);
  const auto before = std::chrono::steady_clock::now();
  app::ShutdownSupervisor supervisor(5s);
  EXPECT_GE(supervisor.deadline(), before + 5s);
  EXPECT_LE(supervisor.deadline(), std::chrono::steady_clock::now() + 5s);
  EXPECT_EQ(supervisor.deadline() - supervisor.steps_deadline(), 1s);
  EXPECT_EQ(supervisor.deadline() - supervisor.interrupt_deadline(), 500ms);
  supervisor.disarm();  // before its deadline: the process goes on
}

// The watchdog at work: a stop that hangs past the deadline ends the process, exit 5.
TEST(ShutdownSupervisor, AStopStillHangingAtTheDeadlineEndsTheProcessWithCode5) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        app::ShutdownSupervisor supervisor(300ms);
        test::work_for(30s);  // a call that never returns
      },
      ::testing::ExitedWithCode(5), "event=shutdown_deadline_exceeded deadline_ms=300");
}
