#include "support/emulator.hpp"

#include <fcntl.h>
#include <libpq-fe.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "support/process.hpp"

namespace sluice::test {

std::pair<int, std::string> run_with_status(const std::string& command) {
  std::array<char, 4096> buffer{};
  std::string out;
  FILE* pipe = popen(("(" + command + ") 2>&1").c_str(), "r");
  if (!pipe) throw std::runtime_error("cannot run " + command);
  while (fgets(buffer.data(), buffer.size(), pipe)) out += buffer.data();
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), out};
}

std::string run_command(const std::string& command) {
  auto [code, out] = run_with_status(command);
  if (code != 0) throw std::runtime_error(command + " failed: " + out);
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

// Starts a child that dies with us (PR_SET_PDEATHSIG), whatever way we die, and
// inherits none of our descriptors but the ones given: a crashed test must not leave
// a server behind holding the test runner's output pipe open.
pid_t spawn_child(const std::vector<std::string>& argv, int stdin_fd, int stdout_fd, int stderr_fd,
                  std::optional<std::pair<uid_t, gid_t>> as_user) {
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid > 0) return pid;
  if (as_user) {
    if (setgid(as_user->second) != 0 || setuid(as_user->first) != 0) _exit(126);
  }
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != parent) _exit(0);  // the parent died before prctl
  dup2(stdin_fd, 0);
  dup2(stdout_fd, 1);
  dup2(stderr_fd, 2);
  close_range(3, ~0U, 0);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  execv(args[0], args.data());
  _exit(127);
}

pid_t spawn_quiet(const std::vector<std::string>& argv, int stdin_fd) {
  const int null_fd = ::open("/dev/null", O_RDWR);
  const pid_t pid = spawn_child(argv, stdin_fd >= 0 ? stdin_fd : null_fd, null_fd, 2);
  ::close(null_fd);
  return pid;
}

int wait_exit(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

NodeServer::NodeServer(const std::string& script) {
  const std::string root = SLUICE_SOURCE_DIR;
  const std::string node = root + "/tools/emulator/node_modules/.bin/node";
  const std::string path = root + "/" + script;
  if (access(node.c_str(), X_OK) != 0)
    throw std::runtime_error("no Node at " + node + " (run scripts/install-deps.sh)");
  int in_pipe[2], out_pipe[2];
  if (pipe2(in_pipe, O_CLOEXEC) != 0 || pipe2(out_pipe, O_CLOEXEC) != 0)
    throw std::runtime_error("pipe failed");
  const int null_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
  pid_ = spawn_child({node, "--no-warnings", path, "0"}, in_pipe[0], out_pipe[1], null_fd);
  close(null_fd);
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

namespace {
// SLUICE_SQS_SERVER picks the SQS server: fauxqs (the default) or local-aws-sqs, an
// independent implementation the SQS test groups also run against.
std::string sqs_server_script() {
  const char* chosen = std::getenv("SLUICE_SQS_SERVER");
  const std::string name = chosen && *chosen ? chosen : "fauxqs";
  if (name == "fauxqs") return "tools/emulator/server.mjs";
  if (name == "local-aws-sqs") return "tools/emulator/local-aws-sqs.mjs";
  throw std::runtime_error("SLUICE_SQS_SERVER: got '" + name +
                           "', expected fauxqs or local-aws-sqs");
}
}  // namespace

std::string Emulator::server_name() {
  const char* chosen = std::getenv("SLUICE_SQS_SERVER");
  return chosen && *chosen ? chosen : "fauxqs";
}

int Emulator::visible_messages(const std::map<std::string, std::string>& attributes) {
  const int counted = std::stoi(attributes.at("ApproximateNumberOfMessages"));
  if (server_name() != "local-aws-sqs") return counted;
  return counted - std::stoi(attributes.at("ApproximateNumberOfMessagesNotVisible"));
}

int Emulator::all_messages(const std::map<std::string, std::string>& attributes) {
  return visible_messages(attributes) +
         std::stoi(attributes.at("ApproximateNumberOfMessagesNotVisible"));
}

Emulator::Emulator() : server_(sqs_server_script()) {}
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
  run_command("runuser -u postgres -- " + bin + "/initdb -D " + dir_ +
              "/data --auth=trust -U postgres -E UTF8");
  port_ = free_port();
  start();
}

void Postgres::start() {
  if (running_) return;
  const passwd* user = getpwnam("postgres");
  if (!user) throw std::runtime_error("no postgres user (install the postgresql package)");
  const int log_fd = open((dir_ + "/log").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  // postgres itself, not pg_ctl: a daemonized server would outlive a crashed test.
  pid_ = spawn_child({"/usr/lib/postgresql/15/bin/postgres", "-D", dir_ + "/data", "-p",
                      std::to_string(port_), "-c", "listen_addresses=127.0.0.1", "-k", dir_, "-c",
                      "fsync=off", "-c", "max_connections=200"},
                     null_fd, log_fd, log_fd, std::make_pair(user->pw_uid, user->pw_gid));
  close(log_fd);
  close(null_fd);
  const std::string conninfo = dsn() + " connect_timeout=1";
  for (int i = 0; i < 300; ++i) {
    if (PQping(conninfo.c_str()) == PQPING_OK) {
      running_ = true;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // PQping's pace while it starts
  }
  throw std::runtime_error("PostgreSQL did not start; see " + dir_ + "/log");
}

void Postgres::stop() {
  if (!running_) return;
  kill(pid_, SIGINT);  // fast shutdown: disconnect clients, stop
  int status = 0;
  waitpid(pid_, &status, 0);
  running_ = false;
}

std::string Postgres::dsn(const std::string& database) const {
  return "host=127.0.0.1 port=" + std::to_string(port_) + " user=postgres dbname=" + database;
}

std::string Postgres::query(const std::string& sql) const {
  // Single-quoted for the shell: SQL's own quotes ("orderId", 'text') pass unchanged.
  std::string quoted = "'";
  for (const char c : sql) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return run_command("psql -X -A -t -q -h 127.0.0.1 -p " + std::to_string(port_) +
                     " -U postgres -c " + quoted + "'");
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
