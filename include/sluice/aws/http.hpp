#pragma once
// A small HTTP/1.1 client for AWS endpoints: TLS verified by default, keep-alive
// pools per endpoint with a cap, connect/request timeouts, a response size cap,
// HTTPS_PROXY/HTTP_PROXY/NO_PROXY, and cancellation through Asio's per-operation
// cancellation (a cancelled long poll returns at once).

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::aws {

struct Url {
  std::string scheme;  // "http" or "https"
  std::string host;
  std::uint16_t port = 0;
  std::string target = "/";  // path and query, as sent on the request line

  // Throws AwsError{configuration} naming the URL and what is wrong with it.
  static Url parse(std::string_view text);
  bool tls() const { return scheme == "https"; }
  bool default_port() const { return port == (tls() ? 443 : 80); }
  std::string host_header() const;  // host[:port], port omitted when default
  std::string origin() const;       // scheme://host[:port]
};

using HeaderList = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method = "GET";
  Url url;
  HeaderList headers;
  std::string body;
  // Zero: the client's default request timeout.
  std::chrono::milliseconds timeout{0};
  // Zero: the client's max_response_bytes; else the smaller of the two.
  std::size_t max_response_bytes = 0;

  void set_header(std::string name, std::string value);  // replaces (case-insensitive)
  std::optional<std::string_view> header(std::string_view name) const;
};

struct HttpResponse {
  int status = 0;
  HeaderList headers;
  std::string body;
  std::optional<std::string_view> header(std::string_view name) const;
};

struct HttpClientOptions {
  std::chrono::milliseconds connect_timeout{3000};
  std::chrono::milliseconds request_timeout{30000};
  std::size_t max_response_bytes = 16 * 1024 * 1024;
  std::size_t max_connections_per_endpoint = 64;
  std::chrono::milliseconds idle_timeout{30000};  // pooled connections older than this are dropped
  bool verify_tls = true;
  std::string ca_file;        // empty: the system's CA store
  bool use_env_proxy = true;  // HTTPS_PROXY / HTTP_PROXY / NO_PROXY, as the AWS CLI does
};

// Which proxy a request goes through, chosen as the AWS CLI does (HTTPS_PROXY for
// https, HTTP_PROXY for http, NO_PROXY's hosts, domains and CIDRs bypass both): what
// an HttpClient with use_env_proxy does, for a caller that wants to say it.
struct ProxySettings {
  std::optional<Url> http_proxy;
  std::optional<Url> https_proxy;
  std::vector<std::string> no_proxy;
  static ProxySettings from_environment();
  std::optional<Url> proxy_for(const Url& target) const;
};

struct HttpClientStats {
  std::uint64_t connections_opened = 0;
  std::uint64_t requests = 0;
  std::size_t idle_connections = 0;
};

class HttpClient {
 public:
  explicit HttpClient(boost::asio::any_io_executor executor, HttpClientOptions options = {});
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // Throws AwsError (transport, timeout, cancelled) on failure; any HTTP status is
  // a response. Safe to call concurrently from many coroutines and threads.
  boost::asio::awaitable<HttpResponse> send(HttpRequest request);

  // Drops pooled idle connections. To abandon an in-flight request (a long poll at
  // shutdown), cancel it through Asio's per-operation cancellation: it then throws
  // AwsError{ErrorKind::cancelled} at once and its connection is closed.
  void close_idle();

  HttpClientStats stats() const;
  const HttpClientOptions& options() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace sluice::aws
