#include "support/emulator.hpp"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>

extern char** environ;

namespace sluice::test {

Emulator& Emulator::shared() {
  static Emulator instance;
  return instance;
}

Emulator::Emulator() {
  const std::string root = SLUICE_SOURCE_DIR;
  const std::string node = root + "/tools/emulator/node_modules/.bin/node";
  const std::string script = root + "/tools/emulator/server.mjs";
  int in_pipe[2], out_pipe[2];
  if (pipe(in_pipe) != 0 || pipe(out_pipe) != 0) throw std::runtime_error("pipe failed");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in_pipe[0], 0);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 1);
  posix_spawn_file_actions_addclose(&actions, in_pipe[1]);
  posix_spawn_file_actions_addclose(&actions, out_pipe[0]);
  const char* argv[] = {node.c_str(), "--no-warnings", script.c_str(), "0", nullptr};
  if (posix_spawn(&pid_, node.c_str(), &actions, nullptr, const_cast<char**>(argv), environ) != 0)
    throw std::runtime_error("cannot start the SQS emulator at " + node +
                             " (run scripts/install-deps.sh)");
  posix_spawn_file_actions_destroy(&actions);
  close(in_pipe[0]);
  close(out_pipe[1]);
  stdin_fd_ = in_pipe[1];
  FILE* out = fdopen(out_pipe[0], "r");
  char line[256];
  if (!out || !fgets(line, sizeof line, out) || sscanf(line, "LISTENING %d", &port_) != 1)
    throw std::runtime_error("the SQS emulator did not report its port");
  // Keep the read end open but unused: the emulator prints nothing else.
}

Emulator::~Emulator() {
  if (stdin_fd_ >= 0) close(stdin_fd_);
  if (pid_ > 0) {
    kill(pid_, SIGTERM);
    int status = 0;
    waitpid(pid_, &status, 0);
  }
}

std::string unique_queue_name(const std::string& prefix) {
  static std::atomic<int> counter{0};
  return prefix + "-" + std::to_string(getpid()) + "-" + std::to_string(counter++) + "-" +
         std::to_string(std::chrono::steady_clock::now().time_since_epoch().count() % 1000000);
}

}  // namespace sluice::test
