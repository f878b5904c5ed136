// One request to a Sluice process's endpoint (observe/http_get.hpp), with Beast.
#include "observe/http_get.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <stdexcept>

namespace sluice::observe {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

// The largest answer read: a /metrics of many pipelines and series stays far below.
constexpr std::uint64_t kMaxBody = 64u << 20;

LocalResponse http_request(const LocalUrl& url, const LocalRequest& request) {
  asio::io_context io;
  auto exchange = [&]() -> asio::awaitable<LocalResponse> {
    asio::ip::tcp::resolver resolver(io);
    beast::tcp_stream stream(io);
    stream.expires_after(request.timeout);  // the whole exchange: each step takes what is left
    const auto endpoints = co_await resolver.async_resolve(url.host, url.port, asio::use_awaitable);
    co_await stream.async_connect(endpoints, asio::use_awaitable);
    http::request<http::empty_body> message{http::string_to_verb(request.method), url.target, 11};
    const bool ipv6 = url.host.find(':') != std::string::npos;
    message.set(http::field::host, (ipv6 ? "[" + url.host + "]" : url.host) +
                                       (url.port == "80" ? "" : ":" + url.port));
    message.set(http::field::user_agent, "sluice");
    for (const auto& [name, value] : request.headers) message.set(name, value);
    message.prepare_payload();  // Content-Length: 0 on a POST
    co_await http::async_write(stream, message, asio::use_awaitable);
    beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    parser.body_limit(kMaxBody);
    co_await http::async_read(stream, buffer, parser, asio::use_awaitable);
    auto answer = parser.release();
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
    if (e.code() == http::error::body_limit)
      throw std::runtime_error("answered with more than " + std::to_string(kMaxBody >> 20) +
                               " MiB");
    // Beast's parser refused it, or the peer closed without a word.
    if (e.code().category() == http::make_error_code(http::error::bad_version).category() ||
        e.code() == asio::error::eof)
      throw std::runtime_error("answered, but not with HTTP (" + e.code().message() + ")");
    throw std::runtime_error(e.code().message());
  }
}

}  // namespace sluice::observe
