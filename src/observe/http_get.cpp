// One request to a Sluice process's endpoint (observe/http_get.hpp), with Beast.
#include "observe/http_get.hpp"

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <charconv>
#include <stdexcept>

#include "common/redact.hpp"

namespace sluice::observe {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

LocalUrl parse_local_url(const std::string& url) {
  const auto shown = "got '" + common::redact_password(url) + "'";
  constexpr std::string_view scheme = "http://";
  if (url.size() < scheme.size() ||
      !std::equal(scheme.begin(), scheme.end(), url.begin(),
                  [](char a, char b) { return a == std::tolower(static_cast<unsigned char>(b)); }))
    throw std::invalid_argument(shown + " (not an http:// URL)");
  const auto rest = std::string_view(url).substr(scheme.size());
  const auto authority_end = rest.find_first_of("/?#");
  const auto authority = rest.substr(0, authority_end);
  if (authority.find('@') != std::string_view::npos)
    throw std::invalid_argument(shown + " (a user in it: the endpoint takes none)");
  LocalUrl out;
  std::string_view port;
  if (authority.starts_with('[')) {  // [::1]:9090
    const auto close = authority.find(']');
    if (close == std::string_view::npos) throw std::invalid_argument(shown + " (an unclosed '[')");
    out.host = std::string(authority.substr(1, close - 1));
    const auto after = authority.substr(close + 1);
    if (!after.empty() && !after.starts_with(':'))
      throw std::invalid_argument(shown + " (something after the IPv6 address)");
    if (!after.empty()) port = after.substr(1);
  } else {
    const auto colon = authority.rfind(':');
    out.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) port = authority.substr(colon + 1);
  }
  if (out.host.empty()) throw std::invalid_argument(shown + " (no host)");
  if (!port.empty()) {
    int number = 0;
    const auto [end, error] = std::from_chars(port.data(), port.data() + port.size(), number);
    if (error != std::errc{} || end != port.data() + port.size() || number < 1 || number > 65535)
      throw std::invalid_argument(shown + " (the port is not a number from 1 to 65535)");
    out.port = std::string(port);
  }
  if (authority_end != std::string_view::npos) {
    auto target = rest.substr(authority_end);
    target = target.substr(0, target.find('#'));
    out.target = target.starts_with('/') ? std::string(target) : "/" + std::string(target);
  }
  return out;
}

LocalResponse http_request(const LocalUrl& url, const LocalRequest& request) {
  asio::io_context io;
  auto exchange = [&]() -> asio::awaitable<LocalResponse> {
    asio::ip::tcp::resolver resolver(io);
    beast::tcp_stream stream(io);
    stream.expires_after(request.timeout);  // the whole exchange: each step takes what is left
    const auto endpoints = co_await resolver.async_resolve(url.host, url.port, asio::use_awaitable);
    co_await stream.async_connect(endpoints, asio::use_awaitable);
    http::request<http::empty_body> message{http::string_to_verb(request.method), url.target, 11};
    message.set(http::field::host, url.host);
    message.set(http::field::user_agent, "sluice");
    for (const auto& [name, value] : request.headers) message.set(name, value);
    message.prepare_payload();  // Content-Length: 0 on a POST
    co_await http::async_write(stream, message, asio::use_awaitable);
    beast::flat_buffer buffer;
    http::response<http::string_body> answer;
    co_await http::async_read(stream, buffer, answer, asio::use_awaitable);
    beast::error_code ignored;
    stream.socket().shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
    co_return LocalResponse{static_cast<int>(answer.result_int()), std::move(answer.body())};
  };
  auto answer = asio::co_spawn(io, exchange(), asio::use_future);
  io.run();
  try {
    return answer.get();
  } catch (const boost::system::system_error& e) {
    if (e.code() == beast::error::timeout)
      throw std::runtime_error("no answer within " + std::to_string(request.timeout.count()) +
                               " ms");
    throw std::runtime_error(e.code().message());
  }
}

}  // namespace sluice::observe
