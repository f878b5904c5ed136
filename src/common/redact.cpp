#include "common/redact.hpp"

#include <algorithm>
#include <utility>
#include <vector>

namespace sluice::common {
namespace {

// Where the password of a connection string is, as written: {start, length}
// (length 0 when there is none).
std::pair<std::size_t, std::size_t> password_span(std::string_view text) {
  if (const auto scheme = text.find("://"); scheme != std::string_view::npos) {
    // URI form: userinfo runs to the last '@' before the query (a password with an
    // unencoded '/', '@' or '#' in it is still the password).
    const auto authority = scheme + 3;
    const auto query = text.find('?', authority);
    const auto at = text.rfind('@', query == std::string_view::npos ? text.size() : query);
    if (at == std::string_view::npos || at < authority) return {0, 0};
    const auto colon = text.find(':', authority);
    if (colon == std::string_view::npos || colon > at) return {0, 0};
    return {colon + 1, at - colon - 1};
  }
  // key=value form (libpq): password = 'quoted \' value' or a bare word.
  for (std::size_t pos = 0; (pos = text.find("password", pos)) != std::string_view::npos;
       pos += 8) {
    if (pos > 0 && text[pos - 1] != ' ') continue;
    std::size_t i = pos + 8;
    while (i < text.size() && text[i] == ' ') ++i;
    if (i >= text.size() || text[i] != '=') continue;
    ++i;
    while (i < text.size() && text[i] == ' ') ++i;
    std::size_t end = i;
    if (i < text.size() && text[i] == '\'') {
      for (end = ++i; end < text.size() && text[end] != '\''; ++end)
        if (text[end] == '\\') ++end;
      end = std::min(end, text.size());
    } else {
      while (end < text.size() && text[end] != ' ') ++end;
    }
    return {i, end - i};
  }
  return {0, 0};
}

void replace_all(std::string& text, const std::string& what) {
  if (what.empty()) return;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 3))
    text.replace(at, what.size(), "***");
}

}  // namespace

std::string redact_password(std::string_view connection_string) {
  std::string out(connection_string);
  const auto [start, length] = password_span(connection_string);
  if (length > 0) out.replace(start, length, "***");
  return out;
}

std::string redact_secret(std::string message, std::string_view connection_string) {
  const auto [start, length] = password_span(connection_string);
  if (length == 0) return message;
  const std::string password(connection_string.substr(start, length));
  replace_all(message, password);
  // A driver may split an unencoded password at '@', '/' or ':' and quote a piece.
  std::string piece;
  std::vector<std::string> pieces;
  for (char c : password) {
    if (c == '@' || c == '/' || c == ':' || c == '#' || c == '?') {
      pieces.push_back(piece);
      piece.clear();
    } else {
      piece += c;
    }
  }
  pieces.push_back(piece);
  if (pieces.size() > 1)
    for (const auto& p : pieces)
      if (p.size() >= 3) replace_all(message, p);
  return message;
}

}  // namespace sluice::common
