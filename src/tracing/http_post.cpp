#include "tracing/http_post.hpp"

#include <openssl/ssl.h>

#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <cctype>
#include <optional>
#include <stdexcept>

#include "common/redact.hpp"

namespace sluice::tracing {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using asio::ip::tcp;
using boost::system::error_code;

Endpoint Endpoint::parse(const std::string& given) {
  const std::string url = common::redact_password(given);  // for the messages
  Endpoint e;
  std::string_view rest = given;
  // The scheme is case-insensitive (RFC 3986, 3.1): HTTPS:// is https://.
  const auto scheme_is = [&](std::string_view scheme) {
    return rest.size() >= scheme.size() &&
           std::equal(scheme.begin(), scheme.end(), rest.begin(), [](char a, char b) {
             return a == std::tolower(static_cast<unsigned char>(b));
           });
  };
  if (scheme_is("https://")) {
    e.tls = true;
    rest.remove_prefix(8);
  } else if (scheme_is("http://")) {
    rest.remove_prefix(7);
  } else {
    throw std::invalid_argument("'" + url + "' is not an http:// or https:// URL");
  }
  // The authority ends at the path, the query or the fragment (a query may come without a
  // path: http://host:4318?x is /?x); a fragment is never sent.
  rest = rest.substr(0, rest.find('#'));
  // User information (user:password@) is refused wherever it would end: a '?' in it must
  // not make it a query.
  if (rest.substr(0, rest.find('/')).find('@') != std::string_view::npos)
    throw std::invalid_argument("'" + url +
                                "' has user information: give the collector's URL "
                                "without it");
  const auto end = rest.find_first_of("/?");
  std::string_view authority = rest.substr(0, end);
  e.target = end == std::string_view::npos ? "/" : std::string(rest.substr(end));
  if (e.target.front() == '?') e.target.insert(e.target.begin(), '/');
  if (authority.empty() || authority.find('@') != std::string_view::npos)
    throw std::invalid_argument("'" + url + "' has no host (or has user information)");
  std::string_view port;
  if (authority.front() == '[') {  // [IPv6]:port
    const auto close = authority.find(']');
    if (close == std::string_view::npos) throw std::invalid_argument("'" + url + "': unclosed [");
    e.host = std::string(authority.substr(1, close - 1));
    if (close + 1 < authority.size()) {
      if (authority[close + 1] != ':') throw std::invalid_argument("'" + url + "': bad port");
      port = authority.substr(close + 2);
    }
  } else {
    const auto colon = authority.rfind(':');
    e.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) port = authority.substr(colon + 1);
  }
  if (!port.empty()) {
    int value = 0;
    for (char c : port) {
      if (c < '0' || c > '9' || (value = value * 10 + (c - '0')) > 65535)
        throw std::invalid_argument("'" + url + "': the port is not a number from 1 to 65535");
    }
    if (value == 0)
      throw std::invalid_argument("'" + url + "': the port is not a number from 1 to 65535");
    e.port = std::string(port);
  } else {
    e.port = e.tls ? "443" : "80";
  }
  if (e.host.empty()) throw std::invalid_argument("'" + url + "' has no host");
  return e;
}

struct HttpPoster::Impl {
  Endpoint endpoint;
  asio::io_context io;
  asio::ssl::context tls{asio::ssl::context::tls_client};
  std::optional<beast::tcp_stream> plain;
  std::optional<beast::ssl_stream<beast::tcp_stream>> secure;
  beast::flat_buffer buffer;

  explicit Impl(Endpoint e) : endpoint(std::move(e)) {
    tls.set_verify_mode(asio::ssl::verify_peer);
    tls.set_default_verify_paths();
  }

  beast::tcp_stream& lowest() { return secure ? beast::get_lowest_layer(*secure) : *plain; }
  bool connected() const { return plain.has_value() || secure.has_value(); }
  void disconnect() {
    plain.reset();
    secure.reset();
    buffer.clear();
  }

  asio::awaitable<void> connect(std::string& failure) {
    tcp::resolver resolver(io);
    auto [rec, results] = co_await resolver.async_resolve(endpoint.host, endpoint.port,
                                                          asio::as_tuple(asio::use_awaitable));
    if (rec) {
      failure = "resolve " + endpoint.host + ": " + rec.message();
      co_return;
    }
    beast::tcp_stream stream(io);
    stream.expires_after(timeout);
    auto [cec, ep] = co_await stream.async_connect(results, asio::as_tuple(asio::use_awaitable));
    if (cec) {
      failure = "connect " + endpoint.host + ":" + endpoint.port + ": " + cec.message();
      co_return;
    }
    stream.socket().set_option(tcp::no_delay(true));
    if (!endpoint.tls) {
      plain.emplace(std::move(stream));
      co_return;
    }
    secure.emplace(std::move(stream), tls);
    SSL_set_tlsext_host_name(secure->native_handle(), endpoint.host.c_str());
    secure->set_verify_callback(asio::ssl::host_name_verification(endpoint.host));
    auto [hec] = co_await secure->async_handshake(asio::ssl::stream_base::client,
                                                  asio::as_tuple(asio::use_awaitable));
    if (hec) {
      failure = "TLS handshake with " + endpoint.host + ": " + hec.message();
      secure.reset();
    }
  }

  template <class Stream>
  asio::awaitable<error_code> exchange(Stream& stream, bhttp::request<bhttp::string_body>& req,
                                       bhttp::response<bhttp::string_body>& res) {
    auto [wec, wn] = co_await bhttp::async_write(stream, req, asio::as_tuple(asio::use_awaitable));
    if (wec) co_return wec;
    bhttp::response_parser<bhttp::string_body> parser;
    parser.body_limit(1 << 20);
    auto [rec, rn] =
        co_await bhttp::async_read(stream, buffer, parser, asio::as_tuple(asio::use_awaitable));
    if (!rec) res = parser.release();
    co_return rec;
  }

  asio::awaitable<void> post(const std::string& body, const std::string& content_type,
                             PostResult& result) {
    for (int attempt = 0; attempt < 2; ++attempt) {
      // A kept connection the collector closed meanwhile fails at once: one more try on
      // a new connection.
      const bool reused = connected();
      if (!reused) {
        std::string failure;
        co_await connect(failure);
        if (!connected()) {
          result.body = failure;
          co_return;
        }
      }
      bhttp::request<bhttp::string_body> req{bhttp::verb::post, endpoint.target, 11};
      const bool v6 = endpoint.host.find(':') != std::string::npos;
      const bool default_port = endpoint.port == (endpoint.tls ? "443" : "80");
      req.set(bhttp::field::host, (v6 ? "[" + endpoint.host + "]" : endpoint.host) +
                                      (default_port ? "" : ":" + endpoint.port));
      req.set(bhttp::field::content_type, content_type);
      req.set(bhttp::field::user_agent, "sluice-otlp");
      req.keep_alive(true);
      req.body() = body;
      req.prepare_payload();
      bhttp::response<bhttp::string_body> res;
      lowest().expires_after(timeout);
      const error_code ec =
          secure ? co_await exchange(*secure, req, res) : co_await exchange(*plain, req, res);
      if (ec) {
        disconnect();
        result.body = "POST " + endpoint.target + ": " + ec.message();
        if (reused && ec != beast::error::timeout) continue;
        co_return;
      }
      result.status = res.result_int();
      result.content_type = std::string(res[bhttp::field::content_type]);
      result.body = std::move(res.body());
      if (!res.keep_alive()) disconnect();
      co_return;
    }
  }

  std::chrono::milliseconds timeout{5000};
};

HttpPoster::HttpPoster(Endpoint endpoint) : impl_(std::make_unique<Impl>(std::move(endpoint))) {}
HttpPoster::~HttpPoster() = default;

PostResult HttpPoster::post(const std::string& body, const std::string& content_type,
                            std::chrono::milliseconds timeout) {
  PostResult result;
  impl_->timeout = timeout;
  impl_->io.restart();
  asio::co_spawn(impl_->io, impl_->post(body, content_type, result), asio::detached);
  // Connecting and the exchange are bounded by the stream's timer; resolving by the
  // system's resolver (a collector is normally named by an address or a local name).
  impl_->io.run();
  return result;
}

}  // namespace sluice::tracing
