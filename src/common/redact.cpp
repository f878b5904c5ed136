#include "common/redact.hpp"

namespace sluice::common {

std::string redact_password(std::string_view text) {
  std::string out(text);
  // URI form: the userinfo's password sits between the first ':' after "//" and the last '@'
  // before the path.
  if (const auto scheme = out.find("://"); scheme != std::string::npos) {
    const auto authority = scheme + 3;
    const auto path = out.find_first_of("/?#", authority);
    const auto at = out.rfind('@', path == std::string::npos ? out.size() : path);
    if (at != std::string::npos && at >= authority) {
      const auto colon = out.find(':', authority);
      if (colon != std::string::npos && colon < at) out.replace(colon + 1, at - colon - 1, "***");
    }
    return out;
  }
  // key=value form: password = 'quoted \' value' or a bare word.
  for (std::size_t pos = 0; (pos = out.find("password", pos)) != std::string::npos;) {
    std::size_t i = pos + 8;
    while (i < out.size() && out[i] == ' ') ++i;
    if (i >= out.size() || out[i] != '=' || (pos > 0 && out[pos - 1] != ' ')) {
      pos += 8;
      continue;
    }
    ++i;
    while (i < out.size() && out[i] == ' ') ++i;
    std::size_t end = i;
    if (end < out.size() && out[end] == '\'') {
      for (++end; end < out.size() && out[end] != '\''; ++end)
        if (out[end] == '\\') ++end;
      end = std::min(end + 1, out.size());
    } else {
      while (end < out.size() && out[end] != ' ') ++end;
    }
    out.replace(i, end - i, "***");
    pos = i + 3;
  }
  return out;
}

}  // namespace sluice::common
