#pragma once
// A loopback HTTP/1.1 server for tests: plays the metadata service, the container
// credentials endpoint, STS, or a misbehaving SQS. Each connection gets a thread.
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace sluice::test {

struct ServerRequest {
  std::string method;
  std::string target;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  int connection = 0;  // which accepted connection carried it
};

struct ServerResponse {
  ServerResponse(int status_ = 200, std::map<std::string, std::string> headers_ = {},
                 std::string body_ = {}, std::chrono::milliseconds delay_ = {}, bool close_ = false)
      : status(status_),
        headers(std::move(headers_)),
        body(std::move(body_)),
        delay(delay_),
        close(close_) {}
  int status = 200;
  std::map<std::string, std::string> headers;
  std::string body;
  std::chrono::milliseconds delay{0};  // before answering
  bool close = false;                  // close the connection after answering
};

class HttpServer {
 public:
  using Handler = std::function<ServerResponse(const ServerRequest&)>;
  explicit HttpServer(Handler handler);
  ~HttpServer();

  int port() const { return port_; }
  std::string url(const std::string& path = "") const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }
  std::vector<ServerRequest> requests() const;
  int connections() const { return connections_.load(); }
  int max_concurrent_connections() const { return max_open_.load(); }
  // Connections waiting for their next request.
  int idle_connections() const;
  // Closes every idle keep-alive connection (to simulate a server-side idle timeout).
  void close_idle_connections();

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
  int port_ = 0;
  std::atomic<int> connections_{0};
  std::atomic<int> open_{0};
  std::atomic<int> max_open_{0};
  friend struct Impl;
};

}  // namespace sluice::test
