#pragma once
// The HTTP endpoint of a running pipeline (or of `sluice autoscale --serve`).

#include <boost/asio/ip/address.hpp>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>

namespace sluice::app {

// "127.0.0.1:9464", "[::1]:0": throws std::invalid_argument saying what was expected.
std::pair<boost::asio::ip::address, unsigned short> parse_listen_address(const std::string& listen);

// GET /metrics, /healthz (the process answers), /readyz (200 when ready() is true,
// else 503), and whatever a handler answers (the admin endpoints). Its own thread;
// loopback by default.
class MetricsServer {
 public:
  // More paths: a JSON document, say.
  struct Route {
    std::string content_type;
    std::function<std::string()> body;
  };
  // A request any method, for a handler: it fills the answer and returns true, or
  // leaves it (false) to the routes above.
  struct Exchange {
    std::string method, target, authorization;
    int status = 200;
    std::string content_type = "text/plain", body, www_authenticate;
  };
  using Handler = std::function<bool(Exchange&)>;
  // `setting` names the option in errors (a port already taken).
  MetricsServer(const std::string& listen, std::function<std::string()> metrics,
                std::function<bool()> ready, std::map<std::string, Route> routes = {},
                const std::string& setting = "metrics.listen (SLUICE_METRICS_LISTEN)",
                Handler handler = {});
  ~MetricsServer();
  int port() const { return port_; }

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace sluice::app
