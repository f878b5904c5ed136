// The pipeline's HTTP endpoint: GET /metrics, /healthz, /readyz and extra routes, on a
// thread of its own.
#include "observe/http_endpoint.hpp"

#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <stdexcept>

#include "common/thread_name.hpp"

namespace sluice::app {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

struct MetricsServer::Impl {
  asio::io_context io;
  asio::ip::tcp::acceptor acceptor{io};
  std::function<std::string()> metrics;
  std::function<bool()> ready;
  std::map<std::string, MetricsServer::Route> routes;
  MetricsServer::Handler handler;
  std::thread thread;

  asio::awaitable<void> session(asio::ip::tcp::socket socket) {
    beast::tcp_stream stream(std::move(socket));
    beast::flat_buffer buffer;
    for (;;) {
      http::request<http::string_body> req;
      stream.expires_after(std::chrono::seconds(30));
      auto [ec, n] =
          co_await http::async_read(stream, buffer, req, asio::as_tuple(asio::use_awaitable));
      if (ec) co_return;
      http::response<http::string_body> res{http::status::ok, req.version()};
      const std::string_view target = req.target();
      MetricsServer::Exchange exchange;
      if (handler) {
        exchange.method = std::string(req.method_string());
        exchange.target = std::string(target);
        exchange.authorization = std::string(req[http::field::authorization]);
      }
      if (handler && handler(exchange)) {
        res.result(static_cast<http::status>(exchange.status));
        res.set(http::field::content_type, exchange.content_type);
        if (!exchange.www_authenticate.empty())
          res.set(http::field::www_authenticate, exchange.www_authenticate);
        res.body() = std::move(exchange.body);
      } else if (target == "/metrics") {
        res.set(http::field::content_type, "text/plain; version=0.0.4");
        res.body() = metrics();
      } else if (auto route = routes.find(std::string(target)); route != routes.end()) {
        res.set(http::field::content_type, route->second.content_type);
        res.body() = route->second.body();
      } else if (target == "/healthz") {
        res.body() = "ok\n";
      } else if (target == "/readyz") {
        const bool is_ready = ready();
        res.result(is_ready ? http::status::ok : http::status::service_unavailable);
        res.body() = is_ready ? "ready\n" : "not ready\n";
      } else {
        res.result(http::status::not_found);
        res.body() = "not found\n";
      }
      res.keep_alive(req.keep_alive());
      res.prepare_payload();
      auto [wec, wn] = co_await http::async_write(stream, res, asio::as_tuple(asio::use_awaitable));
      if (wec || !req.keep_alive()) co_return;
    }
  }

  asio::awaitable<void> accept_loop() {
    for (;;) {
      auto [ec, socket] = co_await acceptor.async_accept(asio::as_tuple(asio::use_awaitable));
      if (ec) co_return;
      asio::co_spawn(io, session(std::move(socket)), asio::detached);
    }
  }
};

std::pair<asio::ip::address, unsigned short> parse_listen_address(const std::string& listen) {
  auto bad = [&](const std::string& expected) {
    return std::invalid_argument("got '" + listen + "', expected " + expected);
  };
  const auto colon = listen.rfind(':');
  if (colon == std::string::npos) throw bad("HOST:PORT, e.g. 127.0.0.1:9464");
  std::string host = listen.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  else if (host.find(':') != std::string::npos)
    throw bad("an IPv6 address in brackets, e.g. [::1]:9464");
  boost::system::error_code ec;
  const auto address = asio::ip::make_address(host, ec);
  if (ec) throw bad("an IP address (e.g. 127.0.0.1 or [::1]) before the port");
  const std::string digits = listen.substr(colon + 1);
  if (digits.empty() || digits.size() > 5 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
      std::stoi(digits) > 65535)
    throw bad("a port from 1 to 65535 (0: any free port)");
  return {address, static_cast<unsigned short>(std::stoi(digits))};
}

MetricsServer::MetricsServer(const std::string& listen, std::function<std::string()> metrics,
                             std::function<bool()> ready, std::map<std::string, Route> routes,
                             const std::string& setting, Handler handler)
    : impl_(std::make_shared<Impl>()) {
  impl_->handler = std::move(handler);
  const auto [address, port] = parse_listen_address(listen);
  impl_->metrics = std::move(metrics);
  impl_->ready = std::move(ready);
  impl_->routes = std::move(routes);
  const asio::ip::tcp::endpoint endpoint(address, static_cast<unsigned short>(port));
  impl_->acceptor.open(endpoint.protocol());
  impl_->acceptor.set_option(asio::ip::tcp::acceptor::reuse_address(true));
  boost::system::error_code ec;
  impl_->acceptor.bind(endpoint, ec);
  if (ec) throw std::runtime_error(setting + " " + listen + ": " + ec.message());
  impl_->acceptor.listen();
  port_ = impl_->acceptor.local_endpoint().port();
  asio::co_spawn(impl_->io, impl_->accept_loop(), asio::detached);
  impl_->thread = std::thread([impl = impl_] {
    common::name_this_thread("sluice-http");
    impl->io.run();
  });
}

MetricsServer::~MetricsServer() {
  impl_->io.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

}  // namespace sluice::app
