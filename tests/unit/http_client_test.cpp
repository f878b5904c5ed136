// The HTTP client against loopback servers: pooling, caps, limits, timeouts,
// cancellation, stale keep-alive connections, TLS verification.
#include <gtest/gtest.h>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <filesystem>
#include <thread>

#include "sluice/aws/error.hpp"
#include "sluice/aws/http.hpp"
#include "support/http_server.hpp"
#include "support/run.hpp"
#include "support/wait.hpp"

namespace asio = boost::asio;
using namespace sluice::aws;
using namespace std::chrono_literals;
using sluice::test::HttpServer;
using sluice::test::ServerRequest;
using sluice::test::ServerResponse;

namespace {
HttpRequest get(const std::string& url) {
  HttpRequest r;
  r.url = Url::parse(url);
  return r;
}
HttpClientOptions no_proxy() {
  HttpClientOptions o;
  o.use_env_proxy = false;
  return o;
}
ErrorKind kind_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const AwsError& e) {
    return e.kind();
  }
  ADD_FAILURE() << "expected an AwsError";
  return ErrorKind::client;
}
}  // namespace

TEST(HttpClient, KeepAliveReusesOneConnection) {
  HttpServer server([](const ServerRequest& r) {
    return ServerResponse{200, {}, "echo " + r.target};
  });
  asio::io_context io;
  HttpClient client(io.get_executor(), no_proxy());
  for (int i = 0; i < 10; ++i) {
    auto res = sluice::test::run(io, client.send(get(server.url("/n" + std::to_string(i)))));
    EXPECT_EQ(res.status, 200);
    EXPECT_EQ(res.body, "echo /n" + std::to_string(i));
  }
  EXPECT_EQ(server.connections(), 1);
  EXPECT_EQ(client.stats().connections_opened, 1u);
}

TEST(HttpClient, ConnectionsPerEndpointAreCapped) {
  HttpServer server([](const ServerRequest&) { return ServerResponse{200, {}, "ok", 100ms}; });
  asio::io_context io;
  auto options = no_proxy();
  options.max_connections_per_endpoint = 2;
  HttpClient client(io.get_executor(), options);
  int done = 0;
  for (int i = 0; i < 8; ++i)
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          auto res = co_await client.send(get(server.url("/")));
          EXPECT_EQ(res.status, 200);
          ++done;
        },
        asio::detached);
  io.run();
  EXPECT_EQ(done, 8);
  EXPECT_LE(server.max_concurrent_connections(), 2);
  EXPECT_LE(server.connections(), 2);
}

TEST(HttpClient, ResponsesOverTheCapAreRefused) {
  HttpServer server([](const ServerRequest&) {
    return ServerResponse{200, {}, std::string(4096, 'x')};
  });
  asio::io_context io;
  auto options = no_proxy();
  options.max_response_bytes = 1024;
  HttpClient client(io.get_executor(), options);
  EXPECT_EQ(kind_of([&] { sluice::test::run(io, client.send(get(server.url("/")))); }),
            ErrorKind::integrity);
}

TEST(HttpClient, RequestTimeoutIsATimeoutError) {
  HttpServer server([](const ServerRequest&) { return ServerResponse{200, {}, "late", 1500ms}; });
  asio::io_context io;
  HttpClient client(io.get_executor(), no_proxy());
  auto request = get(server.url("/"));
  request.timeout = 200ms;
  EXPECT_EQ(kind_of([&] { sluice::test::run(io, client.send(request)); }), ErrorKind::timeout);
}

TEST(HttpClient, ConnectionRefusedIsATransportError) {
  asio::io_context io;
  HttpClient client(io.get_executor(), no_proxy());
  EXPECT_EQ(kind_of([&] { sluice::test::run(io, client.send(get("http://127.0.0.1:9/"))); }),
            ErrorKind::transport);
}

TEST(HttpClient, CancellationAbandonsALongRequestAtOnce) {
  HttpServer server([](const ServerRequest&) { return ServerResponse{200, {}, "late", 3000ms}; });
  asio::io_context io;
  HttpClient client(io.get_executor(), no_proxy());
  asio::cancellation_signal cancel;
  std::optional<ErrorKind> outcome;
  const auto start = std::chrono::steady_clock::now();
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        try {
          co_await client.send(get(server.url("/poll")));
          outcome = ErrorKind::client;  // should not complete normally
        } catch (const AwsError& e) {
          outcome = e.kind();
        }
      },
      asio::bind_cancellation_slot(cancel.slot(), asio::detached));
  asio::steady_timer timer(io, 100ms);
  timer.async_wait([&](auto) { cancel.emit(asio::cancellation_type::terminal); });
  io.run();
  ASSERT_TRUE(outcome);
  EXPECT_EQ(*outcome, ErrorKind::cancelled);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2500ms) << "did not wait for the server";
}

TEST(HttpClient, APooledConnectionClosedByTheServerIsReplacedTransparently) {
  HttpServer server([](const ServerRequest&) { return ServerResponse{200, {}, "ok"}; });
  asio::io_context io;
  HttpClient client(io.get_executor(), no_proxy());
  EXPECT_EQ(sluice::test::run(io, client.send(get(server.url("/a")))).status, 200);
  ASSERT_TRUE(sluice::test::wait_until([&] { return server.idle_connections() > 0; }));
  server.close_idle_connections();
  std::this_thread::sleep_for(50ms);  // the close reaches the client's idle socket
  EXPECT_EQ(sluice::test::run(io, client.send(get(server.url("/b")))).status, 200);
  EXPECT_EQ(server.connections(), 2);
}

TEST(HttpClient, ConnectionCloseResponsesAreNotPooled) {
  HttpServer server([](const ServerRequest&) { return ServerResponse{200, {}, "bye", 0ms, true}; });
  asio::io_context io;
  HttpClient client(io.get_executor(), no_proxy());
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(sluice::test::run(io, client.send(get(server.url("/")))).body, "bye");
  EXPECT_EQ(server.connections(), 3);
  EXPECT_EQ(client.stats().idle_connections, 0u);
}

// A TLS server with a self-signed certificate: verification (on by default) must
// refuse it; with verification off the same server answers.
TEST(HttpClient, TlsVerificationIsOnByDefault) {
  const std::string dir = ::testing::TempDir();
  const std::string cert = dir + "/sluice-test-cert.pem", key = dir + "/sluice-test-key.pem";
  const std::string cmd =
      "openssl req -x509 -newkey rsa:2048 -nodes -subj /CN=localhost -days 1 -keyout " + key +
      " -out " + cert + " 2>/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "openssl is needed to make a test certificate";

  asio::io_context server_io;
  asio::ssl::context tls(asio::ssl::context::tls_server);
  tls.use_certificate_chain_file(cert);
  tls.use_private_key_file(key, asio::ssl::context::pem);
  asio::ip::tcp::acceptor acceptor(server_io, {asio::ip::make_address("127.0.0.1"), 0});
  const int port = acceptor.local_endpoint().port();
  std::thread server([&] {
    for (int i = 0; i < 2; ++i) {
      asio::ssl::stream<asio::ip::tcp::socket> stream(server_io, tls);
      acceptor.accept(stream.next_layer());
      boost::system::error_code ec;
      stream.handshake(asio::ssl::stream_base::server, ec);
      if (ec) continue;
      char buf[4096];
      stream.read_some(asio::buffer(buf), ec);
      const std::string res =
          "HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\nsecure";
      asio::write(stream, asio::buffer(res), ec);
      stream.shutdown(ec);
    }
  });
  {
    asio::io_context io;
    HttpClient verifying(io.get_executor(), no_proxy());
    EXPECT_EQ(kind_of([&] {
                sluice::test::run(
                    io, verifying.send(get("https://localhost:" + std::to_string(port) + "/")));
              }),
              ErrorKind::transport);
  }
  {
    asio::io_context io;
    auto options = no_proxy();
    options.ca_file = cert;  // trusting the certificate explicitly works
    HttpClient trusting(io.get_executor(), options);
    auto res = sluice::test::run(
        io, trusting.send(get("https://localhost:" + std::to_string(port) + "/")));
    EXPECT_EQ(res.body, "secure");
  }
  server.join();
  // The TLS context is made on the first https connection, except that a CA file the
  // configuration names is read at once: a wrong path fails at start, saying which.
  asio::io_context io;
  auto options = no_proxy();
  options.ca_file = "/nonexistent/sluice-ca.pem";
  try {
    HttpClient client(io.get_executor(), options);
    ADD_FAILURE() << "a missing CA file was accepted";
  } catch (const AwsError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::configuration);
    EXPECT_NE(std::string(e.what()).find("/nonexistent/sluice-ca.pem"), std::string::npos)
        << e.what();
  }
  std::filesystem::remove(cert);
  std::filesystem::remove(key);
}
