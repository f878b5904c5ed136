#include "app/shutdown.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <iostream>
#include <stdexcept>
#include <string>

#include "common/thread_name.hpp"

namespace sluice::app {

namespace {

std::atomic<int> g_number{0};
std::atomic<int> g_pipe_read{-1}, g_pipe_write{-1};
std::atomic<bool> g_installed{false};
struct sigaction g_previous_term {
}, g_previous_int{};

void on_signal(int number) {
  const int saved = errno;
  g_number.store(number);
  const char byte = 1;
  // Full: the waiter has bytes to wake it already.
  [[maybe_unused]] const auto written = write(g_pipe_write.load(), &byte, 1);
  errno = saved;
}

void drain_pipe() {
  char bytes[64];
  while (read(g_pipe_read.load(), bytes, sizeof bytes) > 0) {
  }
}

}  // namespace

static_assert(std::atomic<int>::is_always_lock_free, "read and stored in a signal handler");

StopSignal::StopSignal() {
  if (g_installed.exchange(true)) throw std::logic_error("StopSignal: one at a time");
  static const bool made = [] {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return false;
    g_pipe_read = fds[0];
    g_pipe_write = fds[1];
    return true;
  }();
  if (!made) {
    g_installed = false;
    throw std::runtime_error("StopSignal: pipe2 failed");
  }
  drain_pipe();  // what an earlier one's signals left
  g_number = 0;
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &action, &g_previous_term);
  sigaction(SIGINT, &action, &g_previous_int);
}

StopSignal::~StopSignal() {
  sigaction(SIGTERM, &g_previous_term, nullptr);
  sigaction(SIGINT, &g_previous_int, nullptr);
  g_installed = false;
}

int StopSignal::number() const {
  return g_number.load();
}

bool StopSignal::wait_for(std::chrono::milliseconds timeout) const {
  if (requested()) return true;
  pollfd readable{g_pipe_read.load(), POLLIN, 0};
  const int ms = static_cast<int>(std::clamp<std::int64_t>(timeout.count(), 0, 1 << 30));
  if (poll(&readable, 1, ms) > 0) drain_pipe();
  return requested();
}

std::chrono::milliseconds ShutdownSupervisor::reserve(std::chrono::milliseconds shutdown_deadline) {
  using std::chrono::milliseconds;
  return std::clamp(shutdown_deadline / 5, milliseconds(400), milliseconds(2000));
}

ShutdownSupervisor::ShutdownSupervisor(std::chrono::milliseconds shutdown_deadline)
    : shutdown_deadline_(shutdown_deadline),
      reserve_(reserve(shutdown_deadline)),
      deadline_(Clock::now() + shutdown_deadline) {
  watchdog_ = std::thread([this] {
    common::name_this_thread("sluice-watchdog");
    std::unique_lock lock(mutex_);
    if (disarmed_cv_.wait_until(lock, deadline_, [&] { return disarmed_; })) return;
    exit_now(5, "event=shutdown_deadline_exceeded deadline_ms=" +
                    std::to_string(shutdown_deadline_.count()) +
                    " action=exit code=5 (messages not acked are delivered again)");
  });
}

void ShutdownSupervisor::disarm() {
  {
    std::lock_guard lock(mutex_);
    disarmed_ = true;
  }
  disarmed_cv_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
}

ShutdownSupervisor::~ShutdownSupervisor() {
  disarm();
}

void exit_now(int code, std::string_view why) {
  std::cout.flush();
  std::string line = "sluice: " + std::string(why) + "\n";
  for (std::size_t at = 0; at < line.size();) {
    const auto n = write(2, line.data() + at, line.size() - at);
    if (n <= 0) break;
    at += static_cast<std::size_t>(n);
  }
  std::_Exit(code);
}

}  // namespace sluice::app
