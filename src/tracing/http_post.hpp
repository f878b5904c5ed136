#pragma once
// The exporter's one HTTP request: POST a body to a collector, on the exporter's own
// thread, with a deadline for the whole exchange. Keeps its connection between calls.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace sluice::tracing {

struct Endpoint {
  bool tls = false;
  std::string host;
  std::string port;
  std::string target;  // path and query

  // http[s]://host[:port][/path]; throws std::invalid_argument naming the URL.
  static Endpoint parse(const std::string& url);
};

struct PostResult {
  int status = 0;    // 0: no answer (connect, TLS or read failed, or the deadline)
  std::string body;  // the answer's body, or what went wrong
  std::string content_type;
};

class HttpPoster {
 public:
  explicit HttpPoster(Endpoint endpoint);
  ~HttpPoster();
  PostResult post(const std::string& body, const std::string& content_type,
                  std::chrono::milliseconds timeout);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sluice::tracing
