// A Sluice endpoint's URL as the verbs take it (observe/http_get.hpp). Apart from the
// request, which runs in a coroutine: the fuzzers instrument this file, and clang cannot
// instrument a coroutine's frame.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <stdexcept>
#include <string_view>

#include "common/redact.hpp"
#include "observe/http_get.hpp"

namespace sluice::observe {

LocalUrl parse_local_url(const std::string& url) {
  const auto shown = "got '" + common::redact_password(url) + "'";
  constexpr std::string_view scheme = "http://";
  if (url.size() < scheme.size() ||
      !std::equal(scheme.begin(), scheme.end(), url.begin(),
                  [](char a, char b) { return a == std::tolower(static_cast<unsigned char>(b)); }))
    throw std::invalid_argument(shown + " (not an http:// URL)");
  const auto rest = std::string_view(url).substr(scheme.size());
  // A user's password may hold a '/' (http://bob:pa/ss@host): any '@' before the query.
  if (rest.substr(0, rest.find_first_of("?#")).find('@') != std::string_view::npos)
    throw std::invalid_argument(shown + " (a user in it: the endpoint takes none)");
  const auto authority_end = rest.find_first_of("/?#");
  const auto authority = rest.substr(0, authority_end);
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

}  // namespace sluice::observe
