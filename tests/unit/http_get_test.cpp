// The one HTTP request the verbs make to a Sluice endpoint (observe/http_get.hpp):
// URLs as users write them, a loopback server answering, and the failures a user sees.
#include "observe/http_get.hpp"

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <thread>

#include "cli/ctl.hpp"
#include "support/http_server.hpp"

namespace sluice {
namespace {
using observe::http_request;
using observe::parse_local_url;
using namespace std::chrono_literals;

TEST(LocalUrl, ReadsTheForms) {
  auto u = parse_local_url("http://127.0.0.1:9090/metrics");
  EXPECT_EQ(u.host, "127.0.0.1");
  EXPECT_EQ(u.port, "9090");
  EXPECT_EQ(u.target, "/metrics");
  u = parse_local_url("HTTP://localhost");  // RFC 3986: the scheme is case-insensitive
  EXPECT_EQ(u.host, "localhost");
  EXPECT_EQ(u.port, "80");
  EXPECT_EQ(u.target, "/");
  u = parse_local_url("http://[::1]:9090?x=1#top");  // a query without a path
  EXPECT_EQ(u.host, "::1");
  EXPECT_EQ(u.target, "/?x=1");
}

TEST(LocalUrl, RefusesWhatItCannotReachNamingIt) {
  auto refused = [](const std::string& url) {
    try {
      parse_local_url(url);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(refused("https://127.0.0.1:9090"), "got 'https://127.0.0.1:9090' (not an http:// URL)");
  EXPECT_EQ(refused("http://127.0.0.1:0/"),
            "got 'http://127.0.0.1:0/' (the port is not a number from 1 to 65535)");
  EXPECT_EQ(refused("http://127.0.0.1:65536"),
            "got 'http://127.0.0.1:65536' (the port is not a number from 1 to 65535)");
  EXPECT_EQ(refused("http://:9090/"), "got 'http://:9090/' (no host)");
  EXPECT_EQ(refused("http://[::1/"), "got 'http://[::1/' (an unclosed '[')");
  // A password is never repeated.
  const auto with_user = refused("http://admin:s3cret@127.0.0.1:9090/");
  EXPECT_EQ(with_user.find("s3cret"), std::string::npos) << with_user;
  EXPECT_NE(with_user.find("a user in it"), std::string::npos) << with_user;
}

TEST(LocalRequest, SendsTheMethodAndHeadersAndReadsTheAnswer) {
  test::HttpServer server([](const test::ServerRequest& r) {
    return test::ServerResponse(r.method == "POST" ? 202 : 200, {}, r.method + " " + r.target);
  });
  const auto url = parse_local_url(server.url("/pipelines/a/pause"));
  observe::LocalRequest post;
  post.method = "POST";
  post.headers.emplace_back("Authorization", "Bearer t0ken");
  const auto answer = http_request(url, post);
  EXPECT_EQ(answer.status, 202);
  EXPECT_EQ(answer.body, "POST /pipelines/a/pause");
  const auto requests = server.requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].headers.at("authorization"), "Bearer t0ken");
  EXPECT_EQ(requests[0].headers.at("content-length"), "0");
  EXPECT_EQ(http_request(parse_local_url(server.url("/metrics"))).body, "GET /metrics");
}

TEST(LocalRequest, AServerThatDoesNotAnswerInTimeIsAnError) {
  test::HttpServer server(
      [](const test::ServerRequest&) { return test::ServerResponse(200, {}, "late", 1s); });
  observe::LocalRequest request;
  request.timeout = 100ms;
  try {
    http_request(parse_local_url(server.url("/healthz")), request);
    FAIL() << "a late answer was taken";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "no answer within 100 ms");
  }
  // The request had reached the server: the deadline, not a refusal, ended it.
  EXPECT_EQ(server.requests().size(), 1u);
}

TEST(LocalRequest, NothingListeningIsAnError) {
  std::string port;
  {
    test::HttpServer closed([](const test::ServerRequest&) { return test::ServerResponse(); });
    port = std::to_string(closed.port());
  }
  EXPECT_THROW(http_request(parse_local_url("http://127.0.0.1:" + port + "/")), std::runtime_error);
}

TEST(LocalRequest, AnAnswerThatIsNotHttpIsSaidSo) {
  // Another program on the port (a wrong --url): it reads the request, answers a line.
  namespace asio = boost::asio;
  asio::io_context io;
  asio::ip::tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), 0});
  const auto port = std::to_string(acceptor.local_endpoint().port());
  std::thread server([&] {
    auto socket = acceptor.accept();
    char request[512];
    boost::system::error_code ignored;
    socket.read_some(asio::buffer(request), ignored);  // the request was sent
    asio::write(socket, asio::buffer(std::string("SSH-2.0-OpenSSH_9.2\r\n")), ignored);
  });
  try {
    http_request(parse_local_url("http://127.0.0.1:" + port + "/metrics"));
    ADD_FAILURE() << "a line that is not HTTP was taken as an answer";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("answered, but not with HTTP", 0), 0u) << e.what();
  }
  server.join();
}

// An answer over 64 MiB (no /metrics comes near it) is refused as it is read, not held.
TEST(LocalRequest, AnAnswerOverItsLimitIsRefusedAndSaidSo) {
  const std::string body((64u << 20) + 1, 'x');
  test::HttpServer server(
      [&](const test::ServerRequest&) { return test::ServerResponse(200, {}, body); });
  try {
    http_request(parse_local_url(server.url("/metrics")));
    FAIL() << "an answer over the limit was taken";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "answered with more than 64 MiB");
  }
  EXPECT_EQ(server.requests().size(), 1u) << "it was asked";
}

TEST(Ctl, APipelineNameThePathsCannotCarryIsRefusedBeforeAnyRequest) {
  test::HttpServer server([](const test::ServerRequest&) { return test::ServerResponse(); });
  app::CtlOptions o;
  o.action = "pause";
  o.url = server.url();
  o.pipeline = "a b?x#y";
  EXPECT_EQ(app::run_ctl(o), 2);
  EXPECT_TRUE(server.requests().empty());
  o.pipeline = "orders.eu-1";  // a name the `name` key accepts goes out
  app::run_ctl(o);
  ASSERT_EQ(server.requests().size(), 1u);
  EXPECT_EQ(server.requests()[0].target, "/pipelines/orders.eu-1/pause");
}

}  // namespace
}  // namespace sluice
