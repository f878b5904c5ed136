#pragma once
// One request to a Sluice process's own HTTP endpoint (/metrics, /healthz, /readyz,
// /pipelines), for the verbs that read one: `sluice health`, `ctl`, `top` and `plan`.
// Plain HTTP to the address given: no proxy, no signing, one deadline for the
// connection and the exchange (a host name is looked up before it). (The AWS client is for AWS: its
// proxies, retries and signatures have no place here.)
#include <chrono>
#include <string>
#include <utility>
#include <vector>

namespace sluice::observe {

struct LocalUrl {
  std::string host;  // a name, an IPv4 address or an IPv6 one (without brackets)
  std::string port = "80";
  std::string target = "/";  // the path and query
};

// http://HOST[:PORT][/PATH][?QUERY]. Throws std::invalid_argument "got 'URL' (what is
// wrong)", a password in it never repeated.
LocalUrl parse_local_url(const std::string& url);

struct LocalResponse {
  int status = 0;
  std::string body;
};

struct LocalRequest {
  std::string method = "GET";
  std::vector<std::pair<std::string, std::string>> headers;
  std::chrono::milliseconds timeout{5000};
};

// Throws std::runtime_error: refused, no answer within the timeout, not HTTP.
LocalResponse http_request(const LocalUrl& url, const LocalRequest& request = {});

}  // namespace sluice::observe
