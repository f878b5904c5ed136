#pragma once
// Loopback proxies that inject faults between Sluice and a real server, and count
// what they did so that a test can prove the fault really happened.
//
//  - TcpFaultProxy: any TCP protocol (PostgreSQL, the MongoDB wire, SQS over HTTP).
//    stall(): connections stay open, nothing is forwarded either way (a frozen
//    server or network); reset_all(): every connection is closed with a RST;
//    latency: each chunk is held this long before it is forwarded.
//  - HttpFaultProxy: HTTP/1.1 request by request (SQS's JSON protocol): a share of
//    requests answered 500, 503 or 400 ThrottlingException without reaching the
//    server, answered with a truncated body, or cut by a RST; latency per request.
//    Counts requests by X-Amz-Target (ReceiveMessage, DeleteMessageBatch, ...).
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace sluice::test {

class TcpFaultProxy {
 public:
  TcpFaultProxy(std::string target_host, int target_port);
  ~TcpFaultProxy();
  int port() const;
  void stall(bool on);
  void reset_all();
  void set_latency(std::chrono::milliseconds latency);

  std::uint64_t accepted() const;
  std::uint64_t stalled_chunks() const;  // chunks held back by a stall
  std::uint64_t resets() const;          // connections closed by reset_all()
  std::uint64_t forwarded_bytes() const;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

struct HttpFaults {
  double server_error = 0;  // 500 InternalError
  double unavailable = 0;   // 503 ServiceUnavailable
  double throttling = 0;    // 400 ThrottlingException
  double truncate = 0;      // the server's answer with half its body, then a close
  double reset = 0;         // no answer: a RST
  std::chrono::milliseconds latency{0};
  // Only requests whose action (X-Amz-Target after the dot) is one of these get faults
  // and latency (empty: all).
  std::vector<std::string> only_targets;
};

class HttpFaultProxy {
 public:
  HttpFaultProxy(std::string target_host, int target_port, HttpFaults faults, unsigned seed = 7);
  ~HttpFaultProxy();
  int port() const;
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port()); }
  void set_faults(HttpFaults faults);

  // "ReceiveMessage" -> requests seen; "fault:ThrottlingException" -> faults injected.
  std::map<std::string, std::uint64_t> counts() const;
  std::uint64_t count(const std::string& key) const;
  std::uint64_t faults_injected() const;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace sluice::test
