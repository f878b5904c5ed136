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

namespace sluice::app {

namespace {

std::atomic<int> g_number{0};
int g_pipe[2] = {-1, -1};
struct sigaction g_previous_term {
}, g_previous_int{};

void on_signal(int number) {
  const int saved = errno;
  g_number.store(number);
  const char byte = 1;
  [[maybe_unused]] const auto written = write(g_pipe[1], &byte, 1);  // full: already woken
  errno = saved;
}

}  // namespace

static_assert(std::atomic<int>::is_always_lock_free, "stored from a signal handler");

StopSignal::StopSignal() {
  if (g_pipe[0] >= 0) throw std::logic_error("StopSignal: one at a time");
  if (pipe2(g_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
    throw std::runtime_error("StopSignal: pipe2 failed");
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
  close(g_pipe[0]);
  close(g_pipe[1]);
  g_pipe[0] = g_pipe[1] = -1;
}

int StopSignal::number() const {
  return g_number.load();
}

bool StopSignal::wait_for(std::chrono::milliseconds timeout) const {
  if (requested()) return true;
  pollfd readable{g_pipe[0], POLLIN, 0};
  const int ms = static_cast<int>(std::clamp<std::int64_t>(timeout.count(), 0, 1 << 30));
  if (poll(&readable, 1, ms) > 0) {
    char drained[64];
    while (read(g_pipe[0], drained, sizeof drained) > 0) {
    }
  }
  return requested();
}

std::chrono::milliseconds ShutdownSupervisor::reserve(std::chrono::milliseconds shutdown_deadline) {
  using std::chrono::milliseconds;
  return std::clamp(shutdown_deadline / 5, milliseconds(200), milliseconds(2000));
}

ShutdownSupervisor::ShutdownSupervisor(std::chrono::milliseconds shutdown_deadline)
    : shutdown_deadline_(shutdown_deadline),
      reserve_(reserve(shutdown_deadline)),
      deadline_(Clock::now() + shutdown_deadline) {
  watchdog_ = std::thread([this] {
    std::unique_lock lock(mutex_);
    if (disarmed_cv_.wait_until(lock, deadline_, [&] { return disarmed_; })) return;
    spdlog::error(
        "event=shutdown_deadline_exceeded deadline_ms={} action=exit code=5 (messages not "
        "acked are delivered again)",
        shutdown_deadline_.count());
    spdlog::default_logger()->flush();
    std::cout.flush();
    std::_Exit(5);
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

}  // namespace sluice::app
