#include "support/http_server.hpp"

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <set>

namespace sluice::test {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

struct HttpServer::Impl {
  asio::io_context io;
  tcp::acceptor acceptor{io};
  Handler handler;
  std::thread accept_thread;
  std::mutex mutex;
  std::vector<ServerRequest> requests;
  std::vector<std::thread> workers;
  std::set<std::shared_ptr<tcp::socket>> idle;
  std::atomic<bool> stopping{false};
};

HttpServer::HttpServer(Handler handler) : impl_(std::make_shared<Impl>()) {
  impl_->handler = std::move(handler);
  tcp::endpoint endpoint(asio::ip::make_address("127.0.0.1"), 0);
  impl_->acceptor.open(endpoint.protocol());
  impl_->acceptor.set_option(tcp::acceptor::reuse_address(true));
  impl_->acceptor.bind(endpoint);
  impl_->acceptor.listen();
  port_ = impl_->acceptor.local_endpoint().port();
  impl_->accept_thread = std::thread([this] {
    int connection_id = 0;
    while (!impl_->stopping) {
      auto socket = std::make_shared<tcp::socket>(impl_->io);
      boost::system::error_code ec;
      impl_->acceptor.accept(*socket, ec);
      if (ec || impl_->stopping) break;
      const int id = ++connection_id;
      connections_++;
      const int open = ++open_;
      int seen = max_open_.load();
      while (open > seen && !max_open_.compare_exchange_weak(seen, open)) {
      }
      std::lock_guard lock(impl_->mutex);
      impl_->workers.emplace_back([this, socket, id] {
        beast::flat_buffer buffer;
        for (;;) {
          {
            std::lock_guard l(impl_->mutex);
            impl_->idle.insert(socket);
          }
          http::request<http::string_body> req;
          boost::system::error_code rec;
          http::read(*socket, buffer, req, rec);
          {
            std::lock_guard l(impl_->mutex);
            impl_->idle.erase(socket);
          }
          if (rec) break;
          ServerRequest r;
          r.method = std::string(req.method_string());
          r.target = std::string(req.target());
          for (const auto& f : req) {
            std::string name(f.name_string());
            for (char& c : name) c = static_cast<char>(std::tolower(c));
            r.headers[name] = std::string(f.value());
          }
          r.body = req.body();
          r.connection = id;
          {
            std::lock_guard l(impl_->mutex);
            impl_->requests.push_back(r);
          }
          ServerResponse out = impl_->handler(r);
          if (out.delay.count() > 0)
            std::this_thread::sleep_for(out.delay);  // a slow server: the behaviour under test
          http::response<http::string_body> res{static_cast<http::status>(out.status), 11};
          for (const auto& [k, v] : out.headers) res.set(k, v);
          res.body() = out.body;
          res.keep_alive(!out.close);
          res.prepare_payload();
          boost::system::error_code wec;
          http::write(*socket, res, wec);
          if (wec || out.close) break;
        }
        boost::system::error_code ignored;
        socket->shutdown(tcp::socket::shutdown_both, ignored);
        socket->close(ignored);
        --open_;
      });
    }
  });
}

HttpServer::~HttpServer() {
  impl_->stopping = true;
  boost::system::error_code ec;
  // Wake the blocking accept with a connection of our own.
  {
    tcp::socket poke(impl_->io);
    poke.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port_), ec);
  }
  // The accept thread owns the acceptor while it runs: closed only once it has ended (a
  // close racing a blocked accept is a data race on the socket's state).
  impl_->accept_thread.join();
  impl_->acceptor.close(ec);
  close_idle_connections();
  std::vector<std::thread> workers;
  {
    std::lock_guard lock(impl_->mutex);
    workers.swap(impl_->workers);
  }
  for (auto& w : workers) w.join();
}

std::vector<ServerRequest> HttpServer::requests() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->requests;
}

int HttpServer::idle_connections() const {
  std::lock_guard lock(impl_->mutex);
  return static_cast<int>(impl_->idle.size());
}

void HttpServer::close_idle_connections() {
  std::lock_guard lock(impl_->mutex);
  for (const auto& socket : impl_->idle) {
    boost::system::error_code ec;
    socket->shutdown(tcp::socket::shutdown_both, ec);
  }
}

}  // namespace sluice::test
