#pragma once
// The real SQS emulator (fauxqs), started once per test process on a loopback
// ephemeral port and stopped when the process exits (its stdin is our pipe).
#include <string>

namespace sluice::test {

class Emulator {
 public:
  static Emulator& shared();
  int port() const { return port_; }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  // Queue URLs the emulator's own host name does not resolve; address it by loopback.
  std::string queue_url(const std::string& name) const {
    return endpoint() + "/000000000000/" + name;
  }
  ~Emulator();

 private:
  Emulator();
  int pid_ = -1;
  int stdin_fd_ = -1;
  int port_ = 0;
};

// A fresh, unique queue name per call.
std::string unique_queue_name(const std::string& prefix);

}  // namespace sluice::test
