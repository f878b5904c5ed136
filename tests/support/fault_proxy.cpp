#include "support/fault_proxy.hpp"

#include <algorithm>
#include <array>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <future>
#include <random>
#include <thread>
#include <vector>

namespace sluice::test {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using asio::as_tuple;
using asio::use_awaitable;

namespace {

// Runs an io_context on its own thread; `call` runs a function on it and waits.
struct IoThread {
  asio::io_context io;
  std::thread thread;
  void start() {
    thread = std::thread([this] { io.run(); });
  }
  void stop() {
    io.stop();
    if (thread.joinable()) thread.join();
  }
  template <class F>
  void call(F&& f) {
    std::promise<void> done;
    asio::post(io, [&] {
      f();
      done.set_value();
    });
    done.get_future().wait();
  }
};

tcp::acceptor listen_on_loopback(asio::io_context& io) {
  tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  return acceptor;
}

void hard_close(tcp::socket& socket) {
  boost::system::error_code ignored;
  socket.set_option(asio::socket_base::linger(true, 0), ignored);  // RST, not FIN
  socket.close(ignored);
}

}  // namespace

// ---------------------------------------------------------------- TCP

struct TcpFaultProxy::Impl : std::enable_shared_from_this<TcpFaultProxy::Impl> {
  struct Connection {
    explicit Connection(asio::io_context& io, tcp::socket s) : down(std::move(s)), up(io) {}
    tcp::socket down, up;
    bool closed = false;
    void close() {
      closed = true;
      boost::system::error_code ignored;
      down.close(ignored);
      up.close(ignored);
    }
  };

  IoThread runner;
  tcp::acceptor acceptor{listen_on_loopback(runner.io)};
  tcp::endpoint target;
  std::atomic<bool> stalled{false};
  std::atomic<std::int64_t> latency_ms{0};
  std::atomic<std::uint64_t> accepted{0}, stalled_chunks{0}, resets{0}, forwarded{0};
  std::vector<std::weak_ptr<Connection>> connections;  // I/O thread only

  asio::awaitable<void> accept_loop() {
    for (;;) {
      auto [ec, socket] = co_await acceptor.async_accept(as_tuple(use_awaitable));
      if (ec) co_return;
      ++accepted;
      auto conn = std::make_shared<Connection>(runner.io, std::move(socket));
      connections.push_back(conn);
      asio::co_spawn(runner.io, serve(conn), asio::detached);
    }
  }

  asio::awaitable<void> serve(std::shared_ptr<Connection> conn) {
    auto [ec] = co_await conn->up.async_connect(target, as_tuple(use_awaitable));
    if (ec) {
      conn->close();
      co_return;
    }
    asio::co_spawn(runner.io, pump(conn, conn->down, conn->up), asio::detached);
    asio::co_spawn(runner.io, pump(conn, conn->up, conn->down), asio::detached);
  }

  asio::awaitable<void> pump(std::shared_ptr<Connection> conn, tcp::socket& from, tcp::socket& to) {
    std::array<char, 16384> buffer;
    asio::steady_timer timer(runner.io);
    for (;;) {
      auto [ec, n] = co_await from.async_read_some(asio::buffer(buffer), as_tuple(use_awaitable));
      if (ec || conn->closed) break;
      if (stalled) {
        ++stalled_chunks;
        while (stalled && !conn->closed) {
          timer.expires_after(std::chrono::milliseconds(10));
          co_await timer.async_wait(as_tuple(use_awaitable));
        }
        if (conn->closed) break;
      }
      if (const auto ms = latency_ms.load(); ms > 0) {
        timer.expires_after(std::chrono::milliseconds(ms));
        co_await timer.async_wait(as_tuple(use_awaitable));
      }
      auto [wec, written] =
          co_await asio::async_write(to, asio::buffer(buffer.data(), n), as_tuple(use_awaitable));
      if (wec) break;
      forwarded += written;
    }
    conn->close();
  }
};

TcpFaultProxy::TcpFaultProxy(std::string target_host, int target_port)
    : impl_(std::make_shared<Impl>()) {
  impl_->target =
      tcp::endpoint(asio::ip::make_address(target_host), static_cast<unsigned short>(target_port));
  asio::co_spawn(impl_->runner.io, impl_->accept_loop(), asio::detached);
  impl_->runner.start();
}
TcpFaultProxy::~TcpFaultProxy() {
  impl_->runner.stop();
}
int TcpFaultProxy::port() const {
  return impl_->acceptor.local_endpoint().port();
}
void TcpFaultProxy::stall(bool on) {
  impl_->stalled = on;
}
void TcpFaultProxy::set_latency(std::chrono::milliseconds latency) {
  impl_->latency_ms = latency.count();
}
void TcpFaultProxy::reset_all() {
  impl_->runner.call([&] {
    for (auto& weak : impl_->connections)
      if (auto conn = weak.lock(); conn && !conn->closed) {
        hard_close(conn->down);
        conn->close();
        ++impl_->resets;
      }
    impl_->connections.clear();
  });
}
std::uint64_t TcpFaultProxy::accepted() const {
  return impl_->accepted;
}
std::uint64_t TcpFaultProxy::stalled_chunks() const {
  return impl_->stalled_chunks;
}
std::uint64_t TcpFaultProxy::resets() const {
  return impl_->resets;
}
std::uint64_t TcpFaultProxy::forwarded_bytes() const {
  return impl_->forwarded;
}

// ---------------------------------------------------------------- HTTP

struct HttpFaultProxy::Impl {
  IoThread runner;
  tcp::acceptor acceptor{listen_on_loopback(runner.io)};
  tcp::endpoint target;
  mutable std::mutex mutex;
  HttpFaults faults;
  std::mt19937 random;
  std::map<std::string, std::uint64_t> counts;

  void add(const std::string& key) {
    std::lock_guard lock(mutex);
    ++counts[key];
  }

  enum class Fault { none, server_error, unavailable, throttling, truncate, reset };

  Fault choose(const std::string& action) {
    std::lock_guard lock(mutex);
    if (!faults.only_targets.empty() &&
        std::find(faults.only_targets.begin(), faults.only_targets.end(), action) ==
            faults.only_targets.end())
      return Fault::none;
    double roll = std::uniform_real_distribution<double>(0, 1)(random);
    for (auto [share, fault] : {std::pair{faults.server_error, Fault::server_error},
                                {faults.unavailable, Fault::unavailable},
                                {faults.throttling, Fault::throttling},
                                {faults.truncate, Fault::truncate},
                                {faults.reset, Fault::reset}}) {
      if (roll < share) return fault;
      roll -= share;
    }
    return Fault::none;
  }

  asio::awaitable<void> accept_loop() {
    for (;;) {
      auto [ec, socket] = co_await acceptor.async_accept(as_tuple(use_awaitable));
      if (ec) co_return;
      asio::co_spawn(runner.io, serve(std::move(socket)), asio::detached);
    }
  }

  static http::response<http::string_body> error_response(http::status status,
                                                          const std::string& type,
                                                          unsigned version) {
    http::response<http::string_body> res{status, version};
    res.set(http::field::content_type, "application/x-amz-json-1.0");
    res.set("x-amzn-query-error",
            type + ";" + (status == http::status::bad_request ? "Sender" : "Receiver"));
    res.body() =
        R"({"__type":"com.amazonaws.sqs#)" + type + R"(","message":"injected by the fault proxy"})";
    res.prepare_payload();
    return res;
  }

  asio::awaitable<void> serve(tcp::socket socket) {
    beast::tcp_stream down(std::move(socket));
    beast::tcp_stream up(runner.io);
    bool connected = false;
    beast::flat_buffer down_buffer, up_buffer;
    asio::steady_timer timer(runner.io);
    for (;;) {
      http::request<http::string_body> req;
      auto [rec, rn] = co_await http::async_read(down, down_buffer, req, as_tuple(use_awaitable));
      if (rec) co_return;
      std::string action(req["X-Amz-Target"]);
      action = action.substr(action.find('.') + 1);
      add(action.empty() ? "(no target)" : action);
      const Fault fault = choose(action);
      HttpFaults current;
      {
        std::lock_guard lock(mutex);
        current = faults;
      }
      const bool targeted = current.only_targets.empty() ||
                            std::find(current.only_targets.begin(), current.only_targets.end(),
                                      action) != current.only_targets.end();
      if (targeted && current.latency.count() > 0) {
        timer.expires_after(current.latency);
        co_await timer.async_wait(as_tuple(use_awaitable));
      }
      if (fault == Fault::reset) {
        add("fault:reset");
        hard_close(down.socket());
        co_return;
      }
      if (fault == Fault::server_error || fault == Fault::unavailable ||
          fault == Fault::throttling) {
        const auto [status, type] =
            fault == Fault::server_error
                ? std::pair{http::status::internal_server_error, "InternalError"}
            : fault == Fault::unavailable
                ? std::pair{http::status::service_unavailable, "ServiceUnavailable"}
                : std::pair{http::status::bad_request, "ThrottlingException"};
        add(std::string("fault:") + type);
        auto res = error_response(status, type, req.version());
        res.keep_alive(req.keep_alive());
        auto [wec, wn] = co_await http::async_write(down, res, as_tuple(use_awaitable));
        if (wec || !req.keep_alive()) co_return;
        continue;
      }
      if (!connected) {
        auto [cec] = co_await up.async_connect(target, as_tuple(use_awaitable));
        if (cec) co_return;
        connected = true;
      }
      auto [fec, fn] = co_await http::async_write(up, req, as_tuple(use_awaitable));
      if (fec) co_return;
      http::response<http::string_body> res;
      auto [uec, un] = co_await http::async_read(up, up_buffer, res, as_tuple(use_awaitable));
      if (uec) co_return;
      if (fault == Fault::truncate && res.body().size() > 1) {
        add("fault:truncate");
        // The full Content-Length is announced, half the body is sent, then a close.
        std::string raw = "HTTP/1.1 " + std::to_string(res.result_int()) + " " +
                          std::string(res.reason()) + "\r\n";
        for (const auto& field : res)
          raw += std::string(field.name_string()) + ": " + std::string(field.value()) + "\r\n";
        raw += "\r\n" + res.body().substr(0, res.body().size() / 2);
        co_await asio::async_write(down.socket(), asio::buffer(raw), as_tuple(use_awaitable));
        hard_close(down.socket());
        co_return;
      }
      auto [dec, dn] = co_await http::async_write(down, res, as_tuple(use_awaitable));
      if (dec || !res.keep_alive() || !req.keep_alive()) co_return;
    }
  }
};

HttpFaultProxy::HttpFaultProxy(std::string target_host, int target_port, HttpFaults faults,
                               unsigned seed)
    : impl_(std::make_shared<Impl>()) {
  impl_->target =
      tcp::endpoint(asio::ip::make_address(target_host), static_cast<unsigned short>(target_port));
  impl_->faults = std::move(faults);
  impl_->random.seed(seed);
  asio::co_spawn(impl_->runner.io, impl_->accept_loop(), asio::detached);
  impl_->runner.start();
}
HttpFaultProxy::~HttpFaultProxy() {
  impl_->runner.stop();
}
int HttpFaultProxy::port() const {
  return impl_->acceptor.local_endpoint().port();
}
void HttpFaultProxy::set_faults(HttpFaults faults) {
  std::lock_guard lock(impl_->mutex);
  impl_->faults = std::move(faults);
}
std::map<std::string, std::uint64_t> HttpFaultProxy::counts() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->counts;
}
std::uint64_t HttpFaultProxy::count(const std::string& key) const {
  std::lock_guard lock(impl_->mutex);
  auto it = impl_->counts.find(key);
  return it == impl_->counts.end() ? 0 : it->second;
}
std::uint64_t HttpFaultProxy::faults_injected() const {
  std::lock_guard lock(impl_->mutex);
  std::uint64_t n = 0;
  for (const auto& [key, value] : impl_->counts)
    if (key.rfind("fault:", 0) == 0) n += value;
  return n;
}

}  // namespace sluice::test
