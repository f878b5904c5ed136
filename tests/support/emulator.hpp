#pragma once
// Real servers for the tests, each started once per test process on a loopback
// ephemeral port and stopped when the process exits:
//  - the SQS emulator (fauxqs, or local-aws-sqs: SLUICE_SQS_SERVER) and the
//    MongoDB-wire server (CongoDB): Node scripts whose stdin is our pipe, so they
//    also exit if we die;
//  - PostgreSQL 15: a private cluster in a temporary directory, run as `postgres`.
#include <map>
#include <string>

namespace sluice::test {

// A Node script from tools/ that prints "LISTENING <port>" when ready.
class NodeServer {
 public:
  explicit NodeServer(const std::string& script);
  ~NodeServer();
  int port() const { return port_; }
  int pid() const { return pid_; }

 private:
  int pid_ = -1;
  int stdin_fd_ = -1;
  int port_ = 0;
};

class Emulator {
 public:
  static Emulator& shared();
  // fauxqs, or local-aws-sqs when SLUICE_SQS_SERVER says so (docs/sqs-servers.md).
  static std::string server_name();
  // A queue's messages from its attributes, visible (available) and all of them (in
  // flight too). local-aws-sqs counts those in flight in ApproximateNumberOfMessages
  // too, where SQS and fauxqs count only the available ones.
  static int visible_messages(const std::map<std::string, std::string>& attributes);
  static int all_messages(const std::map<std::string, std::string>& attributes);
  int port() const { return server_.port(); }
  int pid() const { return server_.pid(); }  // the benchmarks read its CPU, pin it
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port()); }
  // Queue URLs the emulator's own host name does not resolve; address it by loopback.
  std::string queue_url(const std::string& name) const {
    return endpoint() + "/000000000000/" + name;
  }

 private:
  Emulator();
  NodeServer server_;
};

class MongoWire {
 public:
  static MongoWire& shared();
  std::string uri() const {
    return "mongodb://127.0.0.1:" + std::to_string(server_.port()) + "/?directConnection=true";
  }

 private:
  MongoWire();
  NodeServer server_;
};

class Postgres {
 public:
  static Postgres& shared();
  std::string dsn(const std::string& database = "postgres") const;
  int port() const { return port_; }
  int pid() const { return pid_; }  // the postmaster (the benchmarks read its CPU)
  void stop();                      // fast shutdown (for outage tests)
  void start();
  // Runs SQL through psql; returns its output (tuples only).
  std::string query(const std::string& sql) const;
  ~Postgres();

 private:
  Postgres();
  std::string dir_;
  int pid_ = -1;
  int port_ = 0;
  bool running_ = false;
};

// A fresh, unique name per call (queues, tables, databases).
std::string unique_queue_name(const std::string& prefix);

}  // namespace sluice::test
