#include <openssl/ssl.h>

#include <atomic>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/experimental/concurrent_channel.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <cstdlib>
#include <map>
#include <mutex>

#include "aws/text.hpp"
#include "sluice/aws/error.hpp"
#include "sluice/aws/http.hpp"

namespace sluice::aws {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = asio::ip::tcp;
using boost::system::error_code;

// ---------------------------------------------------------------- Url

Url Url::parse(std::string_view text) {
  auto fail = [&](const char* why) -> Url {
    throw AwsError(ErrorKind::configuration, "malformed endpoint URL '" + std::string(text) +
                                                 "': " + why +
                                                 " (expected http[s]://host[:port][/path])");
  };
  Url url;
  const std::size_t scheme_end = text.find("://");
  if (scheme_end == std::string_view::npos) return fail("missing scheme");
  url.scheme = text::to_lower(text.substr(0, scheme_end));
  if (url.scheme != "http" && url.scheme != "https") return fail("scheme must be http or https");
  std::string_view rest = text.substr(scheme_end + 3);
  const std::size_t path_start = rest.find_first_of("/?");
  std::string_view authority = rest.substr(0, path_start);
  if (path_start != std::string_view::npos) {
    url.target = std::string(rest.substr(path_start));
    if (url.target.front() == '?') url.target.insert(url.target.begin(), '/');
  }
  if (const auto at = authority.rfind('@'); at != std::string_view::npos)
    authority = authority.substr(at + 1);  // user-info (proxies): not used for AWS endpoints
  std::string_view host = authority;
  std::string_view port;
  if (!authority.empty() && authority.front() == '[') {
    const auto close = authority.find(']');
    if (close == std::string_view::npos) return fail("unterminated IPv6 address");
    host = authority.substr(1, close - 1);
    if (close + 1 < authority.size()) {
      if (authority[close + 1] != ':') return fail("junk after IPv6 address");
      port = authority.substr(close + 2);
    }
  } else if (const auto colon = authority.rfind(':'); colon != std::string_view::npos) {
    host = authority.substr(0, colon);
    port = authority.substr(colon + 1);
  }
  if (host.empty()) return fail("missing host");
  for (char c : host)
    if (c == ' ' || c == '/' || c == '\\') return fail("invalid character in host");
  url.host = std::string(host);
  if (port.empty()) {
    url.port = url.tls() ? 443 : 80;
  } else {
    unsigned value = 0;
    for (char c : port) {
      if (c < '0' || c > '9') return fail("port is not a number");
      value = value * 10 + static_cast<unsigned>(c - '0');
      if (value > 65535) return fail("port out of range");
    }
    if (value == 0) return fail("port out of range");
    url.port = static_cast<std::uint16_t>(value);
  }
  return url;
}

std::string Url::host_header() const {
  std::string h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  if (!default_port()) h += ":" + std::to_string(port);
  return h;
}

std::string Url::origin() const {
  return scheme + "://" + host_header();
}

namespace {
std::optional<std::string_view> find_header(const HeaderList& headers, std::string_view name) {
  for (const auto& [n, v] : headers)
    if (text::iequals(n, name)) return std::string_view(v);
  return std::nullopt;
}
}  // namespace

void HttpRequest::set_header(std::string name, std::string value) {
  for (auto& [n, v] : headers) {
    if (text::iequals(n, name)) {
      v = std::move(value);
      return;
    }
  }
  headers.emplace_back(std::move(name), std::move(value));
}

std::optional<std::string_view> HttpRequest::header(std::string_view name) const {
  return find_header(headers, name);
}
std::optional<std::string_view> HttpResponse::header(std::string_view name) const {
  return find_header(headers, name);
}

// ---------------------------------------------------------------- proxies

namespace {
const char* env_either(const char* upper, const char* lower) {
  if (const char* v = std::getenv(upper); v && *v) return v;
  if (const char* v = std::getenv(lower); v && *v) return v;
  return nullptr;
}
}  // namespace

ProxySettings ProxySettings::from_environment() {
  ProxySettings settings;
  if (const char* v = env_either("HTTP_PROXY", "http_proxy")) settings.http_proxy = Url::parse(v);
  if (const char* v = env_either("HTTPS_PROXY", "https_proxy"))
    settings.https_proxy = Url::parse(v);
  if (const char* v = env_either("NO_PROXY", "no_proxy")) {
    for (auto entry : text::split(v, ',')) {
      entry = text::trim(entry);
      if (!entry.empty()) settings.no_proxy.push_back(text::to_lower(entry));
    }
  }
  return settings;
}

std::optional<Url> ProxySettings::proxy_for(const Url& target) const {
  const std::string host = text::to_lower(target.host);
  for (const std::string& rule : no_proxy) {
    if (rule == "*") return std::nullopt;
    std::string_view pattern = rule;
    std::string_view rule_port;
    if (auto colon = pattern.rfind(':'); colon != std::string_view::npos &&
                                         pattern.find(']') == std::string_view::npos &&
                                         pattern.find(':') == colon) {
      rule_port = pattern.substr(colon + 1);
      pattern = pattern.substr(0, colon);
    }
    if (!rule_port.empty() && rule_port != std::to_string(target.port)) continue;
    if (!pattern.empty() && pattern.front() == '.') pattern.remove_prefix(1);
    if (host == pattern) return std::nullopt;
    if (host.size() > pattern.size() && host.ends_with(pattern) &&
        host[host.size() - pattern.size() - 1] == '.')
      return std::nullopt;
  }
  return target.tls() ? https_proxy : http_proxy;
}

// ---------------------------------------------------------------- client

namespace {

using Semaphore = asio::experimental::concurrent_channel<void(error_code)>;

// Beast reads as much as its buffer has room for, at least 512 bytes; the parser empties
// the buffer as it goes, so a buffer left at 512 bytes read a 7 kB ReceiveMessage answer
// in 14 socket calls. Sized once per connection, most answers take one.
constexpr std::size_t kReadBufferBytes = 16 * 1024;

struct Connection {
  Connection() { buffer.reserve(kReadBufferBytes); }
  std::optional<beast::tcp_stream> plain;
  std::optional<beast::ssl_stream<beast::tcp_stream>> secure;
  beast::flat_buffer buffer;
  std::chrono::steady_clock::time_point idle_since{};
  bool absolute_form = false;  // plain HTTP through a proxy
  bool reused = false;

  beast::tcp_stream& lowest() { return secure ? beast::get_lowest_layer(*secure) : *plain; }
};

struct Endpoint {
  Endpoint(asio::any_io_executor ex, std::size_t cap) : permits(ex, cap) {
    for (std::size_t i = 0; i < cap; ++i) permits.try_send(error_code{});
  }
  Semaphore permits;  // one token per connection allowed to this endpoint
  std::mutex mutex;
  std::vector<std::unique_ptr<Connection>> idle;
};

AwsError transport_error(const error_code& ec, const Url& url, std::string_view stage) {
  std::string message = "HTTP " + std::string(stage) + " " + url.origin() + ": " + ec.message();
  if (ec == beast::error::timeout) return AwsError(ErrorKind::timeout, std::move(message));
  if (ec == asio::error::operation_aborted)
    return AwsError(ErrorKind::cancelled, std::move(message));
  if (ec == bhttp::error::body_limit || ec == bhttp::error::header_limit)
    return AwsError(ErrorKind::integrity, message + " (response larger than the configured cap)");
  return AwsError(ErrorKind::transport, std::move(message));
}

bool stale_connection_error(const error_code& ec) {
  return ec == bhttp::error::end_of_stream || ec == asio::error::connection_reset ||
         ec == asio::error::broken_pipe || ec == asio::error::eof ||
         ec == asio::ssl::error::stream_truncated;
}

// One TLS context per (verification, CA file) for the whole process, made when the
// first client needs it: reading the system's CA bundle costs ~20 ms of CPU, and a
// process has a dozen clients (SQS, S3, SNS, CloudWatch, the metadata endpoints). An
// SSL_CTX is safe to share between connections once it is set up.
std::shared_ptr<asio::ssl::context> shared_tls_context(const HttpClientOptions& options) {
  static std::mutex mutex;
  static std::map<std::pair<bool, std::string>, std::weak_ptr<asio::ssl::context>> contexts;
  std::lock_guard lock(mutex);
  auto& slot = contexts[{options.verify_tls, options.ca_file}];
  if (auto existing = slot.lock()) return existing;
  auto context = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_client);
  try {
    context->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                         asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                         asio::ssl::context::no_tlsv1_1);
    if (options.verify_tls) {
      context->set_verify_mode(asio::ssl::verify_peer);
      if (options.ca_file.empty())
        context->set_default_verify_paths();
      else
        context->load_verify_file(options.ca_file);
    } else {
      context->set_verify_mode(asio::ssl::verify_none);
    }
  } catch (const boost::system::system_error& e) {
    throw AwsError(ErrorKind::configuration,
                   options.ca_file.empty()
                       ? "cannot load the system's CA certificates: " + std::string(e.what())
                       : "cannot load the CA file " + options.ca_file + ": " + e.what());
  }
  slot = context;
  return context;
}

}  // namespace

struct HttpClient::Impl : std::enable_shared_from_this<HttpClient::Impl> {
  Impl(asio::any_io_executor ex, HttpClientOptions opts)
      : executor(std::move(ex)), options(std::move(opts)) {
    if (options.use_env_proxy) proxies = ProxySettings::from_environment();
    // A CA file the configuration names is read now, so a wrong path fails at start.
    if (options.verify_tls && !options.ca_file.empty()) tls_context();
  }

  // Built on the first https connection, and shared (see shared_tls_context).
  asio::ssl::context& tls_context() {
    std::call_once(tls_once, [this] { tls = shared_tls_context(options); });
    return *tls;
  }

  std::shared_ptr<Endpoint> endpoint_for(const std::string& key) {
    std::lock_guard lock(mutex);
    auto& slot = endpoints[key];
    if (!slot) slot = std::make_shared<Endpoint>(executor, options.max_connections_per_endpoint);
    return slot;
  }

  std::unique_ptr<Connection> take_idle(Endpoint& endpoint) {
    std::lock_guard lock(endpoint.mutex);
    const auto now = std::chrono::steady_clock::now();
    while (!endpoint.idle.empty()) {
      auto conn = std::move(endpoint.idle.back());
      endpoint.idle.pop_back();
      if (now - conn->idle_since < options.idle_timeout) {
        conn->reused = true;
        return conn;
      }
    }
    return nullptr;
  }

  void give_back(Endpoint& endpoint, std::unique_ptr<Connection> conn) {
    conn->idle_since = std::chrono::steady_clock::now();
    std::lock_guard lock(endpoint.mutex);
    endpoint.idle.push_back(std::move(conn));
  }

  asio::awaitable<std::unique_ptr<Connection>> connect(const Url& url,
                                                       const std::optional<Url>& proxy) {
    const Url& hop = proxy ? *proxy : url;
    tcp::resolver resolver(executor);
    auto [rec, results] = co_await resolver.async_resolve(hop.host, std::to_string(hop.port),
                                                          asio::as_tuple(asio::use_awaitable));
    if (rec) throw transport_error(rec, hop, "resolve");

    auto conn = std::make_unique<Connection>();
    beast::tcp_stream stream(executor);
    stream.expires_after(options.connect_timeout);
    auto [cec, ep] = co_await stream.async_connect(results, asio::as_tuple(asio::use_awaitable));
    if (cec) throw transport_error(cec, hop, "connect");
    stream.socket().set_option(tcp::no_delay(true));
    connections_opened.fetch_add(1, std::memory_order_relaxed);

    if (proxy && url.tls()) {
      // Tunnel through the proxy with CONNECT, then speak TLS end to end.
      bhttp::request<bhttp::empty_body> req{bhttp::verb::connect, url.host_header(), 11};
      req.set(bhttp::field::host, url.host_header());
      auto [wec, wn] =
          co_await bhttp::async_write(stream, req, asio::as_tuple(asio::use_awaitable));
      if (wec) throw transport_error(wec, hop, "proxy CONNECT");
      bhttp::response_parser<bhttp::empty_body> parser;
      parser.skip(true);
      auto [rec2, rn] = co_await bhttp::async_read(stream, conn->buffer, parser,
                                                   asio::as_tuple(asio::use_awaitable));
      if (rec2) throw transport_error(rec2, hop, "proxy CONNECT");
      if (parser.get().result_int() != 200)
        throw AwsError(ErrorKind::transport, "proxy " + hop.origin() + " refused CONNECT to " +
                                                 url.host_header() + " with status " +
                                                 std::to_string(parser.get().result_int()));
    }
    if (url.tls()) {
      conn->secure.emplace(std::move(stream), tls_context());
      auto& ssl = *conn->secure;
      if (!SSL_set_tlsext_host_name(ssl.native_handle(), url.host.c_str()))
        throw AwsError(ErrorKind::configuration, "cannot set TLS SNI for " + url.host);
      if (options.verify_tls) ssl.set_verify_callback(asio::ssl::host_name_verification(url.host));
      auto [hec] = co_await ssl.async_handshake(asio::ssl::stream_base::client,
                                                asio::as_tuple(asio::use_awaitable));
      if (hec) throw transport_error(hec, url, "TLS handshake");
    } else {
      conn->plain.emplace(std::move(stream));
      conn->absolute_form = proxy.has_value();
    }
    conn->lowest().expires_never();
    co_return conn;
  }

  template <class Stream>
  static asio::awaitable<error_code> exchange(Stream& stream, beast::flat_buffer& buffer,
                                              bhttp::request<bhttp::string_body>& req,
                                              bhttp::response_parser<bhttp::string_body>& parser,
                                              bool& wrote) {
    auto [wec, wn] = co_await bhttp::async_write(stream, req, asio::as_tuple(asio::use_awaitable));
    if (wec) co_return wec;
    wrote = true;
    auto [rec, rn] =
        co_await bhttp::async_read(stream, buffer, parser, asio::as_tuple(asio::use_awaitable));
    co_return rec;
  }

  asio::awaitable<HttpResponse> send(HttpRequest request) {
    const std::optional<Url> proxy = proxies.proxy_for(request.url);
    const std::string key =
        request.url.origin() + (proxy ? " via " + proxy->origin() : std::string());
    const auto endpoint = endpoint_for(key);

    // Wait for a connection permit: the cap on connections to this endpoint.
    auto [pec] = co_await endpoint->permits.async_receive(asio::as_tuple(asio::use_awaitable));
    if (pec) throw transport_error(pec, request.url, "wait for a connection");
    struct PermitGuard {
      Endpoint& endpoint;
      ~PermitGuard() { endpoint.permits.try_send(error_code{}); }
    } permit{*endpoint};

    bhttp::request<bhttp::string_body> req;
    req.method_string(request.method);
    req.version(11);
    for (const auto& [name, value] : request.headers) req.insert(name, value);
    if (req.find(bhttp::field::host) == req.end())
      req.set(bhttp::field::host, request.url.host_header());
    req.body() = std::move(request.body);
    req.keep_alive(true);
    req.prepare_payload();
    const auto timeout = request.timeout.count() > 0 ? request.timeout : options.request_timeout;

    for (int attempt = 0;; ++attempt) {
      std::unique_ptr<Connection> conn = attempt == 0 ? take_idle(*endpoint) : nullptr;
      if (!conn) conn = co_await connect(request.url, proxy);
      req.target(conn->absolute_form ? request.url.origin() + request.url.target
                                     : request.url.target);
      bhttp::response_parser<bhttp::string_body> parser;
      parser.body_limit(request.max_response_bytes > 0
                            ? std::min(request.max_response_bytes, options.max_response_bytes)
                            : options.max_response_bytes);
      parser.header_limit(64 * 1024);
      bool wrote = false;
      conn->lowest().expires_after(timeout);
      conn->buffer.clear();
      const error_code ec = conn->secure
                                ? co_await exchange(*conn->secure, conn->buffer, req, parser, wrote)
                                : co_await exchange(*conn->plain, conn->buffer, req, parser, wrote);
      if (ec) {
        // A pooled connection the server closed while idle: retry once on a new one.
        const bool nothing_received = !parser.got_some();
        if (conn->reused && attempt == 0 && nothing_received && stale_connection_error(ec))
          continue;
        throw transport_error(ec, request.url, wrote ? "read" : "write");
      }
      conn->lowest().expires_never();
      requests.fetch_add(1, std::memory_order_relaxed);

      auto& res = parser.get();
      HttpResponse response;
      response.status = static_cast<int>(res.result_int());
      response.headers.reserve(8);
      for (const auto& field : res)
        response.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
      const bool reusable = res.keep_alive() && !parser.need_eof();
      response.body = std::move(res.body());
      if (reusable) give_back(*endpoint, std::move(conn));
      co_return response;
    }
  }

  asio::any_io_executor executor;
  HttpClientOptions options;
  std::once_flag tls_once;
  std::shared_ptr<asio::ssl::context> tls;
  ProxySettings proxies;
  std::mutex mutex;
  std::map<std::string, std::shared_ptr<Endpoint>> endpoints;
  std::atomic<std::uint64_t> connections_opened{0};
  std::atomic<std::uint64_t> requests{0};
};

HttpClient::HttpClient(asio::any_io_executor executor, HttpClientOptions options)
    : impl_(std::make_shared<Impl>(std::move(executor), std::move(options))) {}

HttpClient::~HttpClient() = default;

asio::awaitable<HttpResponse> HttpClient::send(HttpRequest request) {
  auto impl = impl_;  // keep the pools alive for the whole request
  co_return co_await impl->send(std::move(request));
}

void HttpClient::close_idle() {
  std::lock_guard lock(impl_->mutex);
  for (auto& [key, endpoint] : impl_->endpoints) {
    std::lock_guard endpoint_lock(endpoint->mutex);
    endpoint->idle.clear();
  }
}

HttpClientStats HttpClient::stats() const {
  HttpClientStats s;
  s.connections_opened = impl_->connections_opened.load();
  s.requests = impl_->requests.load();
  std::lock_guard lock(impl_->mutex);
  for (auto& [key, endpoint] : impl_->endpoints) {
    std::lock_guard endpoint_lock(endpoint->mutex);
    s.idle_connections += endpoint->idle.size();
  }
  return s;
}

const HttpClientOptions& HttpClient::options() const {
  return impl_->options;
}

}  // namespace sluice::aws
