#pragma once
// Stopping `sluice run`: SIGTERM and SIGINT as an event the main loop waits on, and one
// deadline that the whole stop, exit included, holds.

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string_view>
#include <thread>

namespace sluice::app {

// SIGTERM and SIGINT while it lives (the previous handlers come back after). The
// handler only stores the number and writes a byte to a pipe, all a signal handler
// may do; wait_for() sleeps on that pipe, so a signal wakes it at once. One at a time;
// the pipe is the process's, made once and never closed (a handler still running on
// another thread when this ends writes to it harmlessly).
class StopSignal {
 public:
  StopSignal();
  ~StopSignal();
  StopSignal(const StopSignal&) = delete;
  StopSignal& operator=(const StopSignal&) = delete;

  int number() const;  // the signal that came, 0 if none
  bool requested() const { return number() != 0; }
  // Waits up to `timeout` for a signal; true when one has come.
  bool wait_for(std::chrono::milliseconds timeout) const;
};

// The stop, from its first step to the process's exit, within `shutdown_deadline`:
// its steps (intake, handlers, the final flush, the source's destruction, the writers)
// share steps_deadline(); database calls still running then are interrupted and must
// have returned by interrupt_deadline(), which the closing count also keeps; a
// watchdog ends the process with exit code 5 at the deadline itself if a call still
// hangs then (what was not acked is delivered again).
class ShutdownSupervisor {
 public:
  using Clock = std::chrono::steady_clock;
  explicit ShutdownSupervisor(std::chrono::milliseconds shutdown_deadline);
  ~ShutdownSupervisor();  // disarms
  ShutdownSupervisor(const ShutdownSupervisor&) = delete;
  ShutdownSupervisor& operator=(const ShutdownSupervisor&) = delete;

  Clock::time_point steps_deadline() const { return deadline_ - reserve_; }
  Clock::time_point interrupt_deadline() const { return deadline_ - reserve_ / 2; }
  Clock::time_point deadline() const { return deadline_; }
  void disarm();

  // What the steps leave of the deadline for interrupted calls, the summary and the
  // exit: a fifth of it, between 400 ms and 2 s.
  static std::chrono::milliseconds reserve(std::chrono::milliseconds shutdown_deadline);

 private:
  std::chrono::milliseconds shutdown_deadline_;
  std::chrono::milliseconds reserve_;
  Clock::time_point deadline_;
  std::mutex mutex_;
  std::condition_variable disarmed_cv_;
  bool disarmed_ = false;  // under mutex_
  std::thread watchdog_;
};

// Ends the process at once with `code`, saying why on standard error first: written
// straight to the descriptor, since the asynchronous logger's queue dies with the
// process.
[[noreturn]] void exit_now(int code, std::string_view why);

}  // namespace sluice::app
