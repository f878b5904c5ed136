#pragma once
// Child processes and ports for the test servers.
#include <sys/types.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace sluice::test {

// Runs a shell command; returns its output (stdout and stderr); throws if it fails.
std::string run_command(const std::string& command);
// Runs a shell command; returns its exit code and output (stdout and stderr).
std::pair<int, std::string> run_with_status(const std::string& command);
// A loopback port free at the time of the call.
int free_port();
// Starts a child that dies with us (PR_SET_PDEATHSIG) and inherits none of our
// descriptors but the three given; optionally as another user.
pid_t spawn_child(const std::vector<std::string>& argv, int stdin_fd, int stdout_fd, int stderr_fd,
                  std::optional<std::pair<uid_t, gid_t>> as_user = std::nullopt);

// spawn_child with /dev/null for standard input (unless `stdin_fd`) and output, and
// the standard error inherited (a child's complaints show in the test's log).
pid_t spawn_quiet(const std::vector<std::string>& argv, int stdin_fd = -1);
// Waits for `pid`: its exit code, or minus the signal that ended it.
int wait_exit(pid_t pid);

}  // namespace sluice::test
