#pragma once
// A private RabbitMQ 3.10 broker (Debian's rabbitmq-server) for the tests: its own
// node name, data directory and loopback ports, and its own epmd, all children of
// the test process (they die with it), with TLS and the management plugin on their own
// ports. Started once per process; 5-10 s.
#include <map>
#include <string>
#include <vector>

namespace sluice::test {

struct BrokerQueue {
  long ready = -1, unacked = -1, consumers = -1;
};

class RabbitMq {
 public:
  static RabbitMq& shared();
  ~RabbitMq();
  int port() const { return port_; }
  std::string uri(const std::string& user = "guest", const std::string& password = "guest") const;
  // rabbitmqctl with this node's environment; returns its output.
  std::string ctl(const std::string& arguments) const;
  // The broker's own counts (rabbitmqctl list_queues); ready -1 when the queue is missing.
  BrokerQueue queue(const std::string& name) const;
  void stop();   // rabbitmqctl shutdown (data kept)
  void start();  // again, same ports and data
  // TLS: a listener on tls_port() with a certificate signed by ca_file() for "localhost".
  int tls_port() const { return tls_port_; }
  std::string ca_file() const { return dir_ + "/ca.pem"; }
  // The management plugin's HTTP API (statistics every 500 ms).
  std::string management_url() const {
    return "http://127.0.0.1:" + std::to_string(management_port_);
  }

 private:
  RabbitMq();
  std::vector<std::string> environment() const;
  std::string dir_;
  int port_ = 0, dist_port_ = 0, epmd_port_ = 0, tls_port_ = 0, management_port_ = 0;
  int broker_pid_ = -1, epmd_pid_ = -1;
  bool running_ = false;
};

}  // namespace sluice::test
