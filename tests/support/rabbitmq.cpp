#include "support/rabbitmq.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "support/process.hpp"

namespace sluice::test {

namespace {

bool port_open(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  close(fd);
  return ok;
}

}  // namespace

RabbitMq& RabbitMq::shared() {
  static RabbitMq instance;
  return instance;
}

RabbitMq::RabbitMq() {
  char pattern[] = "/tmp/sluice-rabbitmq-XXXXXX";
  if (!mkdtemp(pattern)) throw std::runtime_error("mkdtemp failed");
  dir_ = pattern;
  port_ = free_port();
  dist_port_ = free_port();
  epmd_port_ = free_port();
  tls_port_ = free_port();
  management_port_ = free_port();
  std::filesystem::create_directories(dir_ + "/home");
  std::ofstream(dir_ + "/conf.env").flush();
  std::ofstream(dir_ + "/plugins") << "[rabbitmq_management].\n";
  // A CA and a server certificate for "localhost", for the TLS listener.
  run_command(
      "cd " + dir_ +
      " && openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=sluice-test-ca"
      " -keyout ca.key -out ca.pem"
      " && openssl req -newkey rsa:2048 -nodes -subj /CN=localhost -keyout server.key"
      " -out server.csr"
      " && printf 'subjectAltName=DNS:localhost\\n' > san.ext"
      " && openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2"
      " -extfile san.ext -out server.pem && chmod 644 server.key");
  const auto write_conf = [this] {
    std::ofstream(dir_ + "/rabbitmq.conf") << "listeners.ssl.default = " << tls_port_ << "\n"
                                           << "ssl_options.cacertfile = " << dir_ << "/ca.pem\n"
                                           << "ssl_options.certfile = " << dir_ << "/server.pem\n"
                                           << "ssl_options.keyfile = " << dir_ << "/server.key\n"
                                           << "ssl_options.verify = verify_none\n"
                                           << "ssl_options.fail_if_no_peer_cert = false\n"
                                           << "loopback_users = none\n"
                                           << "management.tcp.port = " << management_port_ << "\n"
                                           << "management.tcp.ip = 127.0.0.1\n"
                                           << "collect_statistics_interval = 500\n";
  };
  write_conf();
  const int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
  // Our own epmd, in the foreground: it dies with us instead of lingering as a daemon.
  epmd_pid_ =
      spawn_child({"/usr/bin/epmd", "-port", std::to_string(epmd_port_), "-address", "127.0.0.1"},
                  null_fd, null_fd, null_fd, std::nullopt);
  close(null_fd);
  for (int attempt = 1;; ++attempt) {
    try {
      start();
      return;
    } catch (const std::runtime_error&) {
      // A port chosen free was taken by another process before the broker bound it:
      // new ports, and again (at most three times).
      std::ifstream log(dir_ + "/server.log");
      const std::string text((std::istreambuf_iterator<char>(log)), {});
      if (attempt == 3 || text.find("could_not_start_listener") == std::string::npos) throw;
      port_ = free_port();
      dist_port_ = free_port();
      tls_port_ = free_port();
      management_port_ = free_port();
      write_conf();
    }
  }
}

std::vector<std::string> RabbitMq::environment() const {
  return {"HOME=" + dir_ + "/home",
          "RABBITMQ_NODENAME=sluice" + std::to_string(port_) + "@localhost",
          "RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
          "RABBITMQ_NODE_PORT=" + std::to_string(port_),
          "RABBITMQ_DIST_PORT=" + std::to_string(dist_port_),
          "ERL_EPMD_PORT=" + std::to_string(epmd_port_),
          "ERL_EPMD_ADDRESS=127.0.0.1",
          "RABBITMQ_MNESIA_BASE=" + dir_ + "/mnesia",
          "RABBITMQ_LOG_BASE=" + dir_ + "/log",
          "RABBITMQ_PID_FILE=" + dir_ + "/pid",
          "RABBITMQ_CONF_ENV_FILE=" + dir_ + "/conf.env",
          "RABBITMQ_CONFIG_FILE=" + dir_ + "/rabbitmq.conf",
          "RABBITMQ_ENABLED_PLUGINS_FILE=" + dir_ + "/plugins",
          "PATH=/usr/lib/rabbitmq/bin:/usr/bin:/bin"};
}

void RabbitMq::start() {
  if (running_) return;
  std::vector<std::string> argv{"/usr/bin/env"};
  for (auto& e : environment()) argv.push_back(e);
  argv.push_back("/usr/lib/rabbitmq/bin/rabbitmq-server");
  const int log_fd =
      open((dir_ + "/server.log").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  broker_pid_ = spawn_child(argv, null_fd, log_fd, log_fd, std::nullopt);
  close(log_fd);
  close(null_fd);
  for (int i = 0; i < 600; ++i) {
    if (port_open(port_)) {
      running_ = true;
      return;
    }
    int status = 0;
    if (waitpid(broker_pid_, &status, WNOHANG) == broker_pid_)
      throw std::runtime_error("RabbitMQ exited at start; see " + dir_ + "/server.log");
    // The probe's pace while it starts (no event to wait on but its answer).
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // probe pace
  }
  throw std::runtime_error("RabbitMQ did not start in 60 s; see " + dir_ + "/server.log");
}

std::string RabbitMq::ctl(const std::string& arguments) const {
  std::string command = "env";
  for (auto& e : environment()) command += " '" + e + "'";
  return run_command(command + " /usr/lib/rabbitmq/bin/rabbitmqctl " + arguments);
}

BrokerQueue RabbitMq::queue(const std::string& name) const {
  std::istringstream lines(
      ctl("-q list_queues name messages_ready messages_unacknowledged consumers"));
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::string queue_name;
    BrokerQueue q;
    if (fields >> queue_name >> q.ready >> q.unacked >> q.consumers && queue_name == name) return q;
  }
  return {};
}

void RabbitMq::stop() {
  if (!running_) return;
  try {
    ctl("shutdown");
  } catch (...) {
    kill(broker_pid_, SIGTERM);
  }
  int status = 0;
  waitpid(broker_pid_, &status, 0);
  running_ = false;
}

std::string RabbitMq::uri(const std::string& user, const std::string& password) const {
  return "amqp://" + user + ":" + password + "@127.0.0.1:" + std::to_string(port_) + "/%2f";
}

RabbitMq::~RabbitMq() {
  try {
    stop();
  } catch (...) {
  }
  if (epmd_pid_ > 0) {
    kill(epmd_pid_, SIGTERM);
    int status = 0;
    waitpid(epmd_pid_, &status, 0);
  }
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

}  // namespace sluice::test
