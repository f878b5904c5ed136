#include "support/emulator.hpp"

#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <string>

extern char** environ;

namespace sluice::test {
namespace {

std::string run_command(const std::string& command) {
  std::array<char, 4096> buffer{};
  std::string out;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (!pipe) throw std::runtime_error("cannot run " + command);
  while (fgets(buffer.data(), buffer.size(), pipe)) out += buffer.data();
  const int status = pclose(pipe);
  if (status != 0) throw std::runtime_error(command + " failed: " + out);
  return out;
}

int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

}  // namespace

NodeServer::NodeServer(const std::string& script) {
  const std::string root = SLUICE_SOURCE_DIR;
  const std::string node = root + "/tools/emulator/node_modules/.bin/node";
  const std::string path = root + "/" + script;
  int in_pipe[2], out_pipe[2];
  if (pipe(in_pipe) != 0 || pipe(out_pipe) != 0) throw std::runtime_error("pipe failed");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in_pipe[0], 0);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 1);
  posix_spawn_file_actions_addclose(&actions, in_pipe[1]);
  posix_spawn_file_actions_addclose(&actions, out_pipe[0]);
  const char* argv[] = {node.c_str(), "--no-warnings", path.c_str(), "0", nullptr};
  if (posix_spawn(&pid_, node.c_str(), &actions, nullptr, const_cast<char**>(argv), environ) != 0)
    throw std::runtime_error("cannot start " + path + " with " + node + " (run scripts/install-deps.sh)");
  posix_spawn_file_actions_destroy(&actions);
  close(in_pipe[0]);
  close(out_pipe[1]);
  stdin_fd_ = in_pipe[1];
  FILE* out = fdopen(out_pipe[0], "r");
  char line[256];
  if (!out || !fgets(line, sizeof line, out) || sscanf(line, "LISTENING %d", &port_) != 1)
    throw std::runtime_error(path + " did not report its port");
}

NodeServer::~NodeServer() {
  if (stdin_fd_ >= 0) close(stdin_fd_);
  if (pid_ > 0) {
    kill(pid_, SIGTERM);
    int status = 0;
    waitpid(pid_, &status, 0);
  }
}

Emulator::Emulator() : server_("tools/emulator/server.mjs") {}
Emulator& Emulator::shared() {
  static Emulator instance;
  return instance;
}

MongoWire::MongoWire() : server_("tools/mongo-wire/server.mjs") {}
MongoWire& MongoWire::shared() {
  static MongoWire instance;
  return instance;
}

Postgres& Postgres::shared() {
  static Postgres instance;
  return instance;
}

Postgres::Postgres() {
  char pattern[] = "/tmp/sluice-pg-XXXXXX";
  if (!mkdtemp(pattern)) throw std::runtime_error("mkdtemp failed");
  dir_ = pattern;
  const std::string bin = "/usr/lib/postgresql/15/bin";
  // initdb and postgres refuse to run as root.
  run_command("chown postgres " + dir_ + " && chmod 700 " + dir_);
  run_command("runuser -u postgres -- " + bin + "/initdb -D " + dir_ + "/data --auth=trust -U postgres -E UTF8");
  port_ = free_port();
  start();
}

void Postgres::start() {
  if (running_) return;
  run_command("runuser -u postgres -- /usr/lib/postgresql/15/bin/pg_ctl -D " + dir_ + "/data -w -l " + dir_ +
              "/log start -o \"-p " + std::to_string(port_) + " -c listen_addresses=127.0.0.1 -k " + dir_ +
              " -c fsync=off -c max_connections=200\"");
  running_ = true;
}

void Postgres::stop() {
  if (!running_) return;
  run_command("runuser -u postgres -- /usr/lib/postgresql/15/bin/pg_ctl -D " + dir_ + "/data -w -m fast stop");
  running_ = false;
}

std::string Postgres::dsn(const std::string& database) const {
  return "host=127.0.0.1 port=" + std::to_string(port_) + " user=postgres dbname=" + database;
}

std::string Postgres::query(const std::string& sql) const {
  return run_command("psql -X -A -t -q -h 127.0.0.1 -p " + std::to_string(port_) + " -U postgres -c \"" + sql + "\"");
}

Postgres::~Postgres() {
  try {
    stop();
  } catch (...) {
  }
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

std::string unique_queue_name(const std::string& prefix) {
  static std::atomic<int> counter{0};
  return prefix + "-" + std::to_string(getpid()) + "-" + std::to_string(counter++) + "-" +
         std::to_string(std::chrono::steady_clock::now().time_since_epoch().count() % 1000000);
}

}  // namespace sluice::test
