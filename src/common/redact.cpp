#include "common/redact.hpp"

#include <algorithm>
#include <cctype>
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
    // The last '@' of the whole string: a password may hold '?', '/', '#' or '@'
    // unencoded; hiding too much is harmless, too little is not.
    const auto authority = scheme + 3;
    const auto at = text.rfind('@');
    if (at == std::string_view::npos || at < authority) return {0, 0};
    const auto colon = text.find(':', authority);
    if (colon == std::string_view::npos || colon > at) {
      // An HTTP(S) URL's userinfo without a ':' is a token (https://APIKEY@host): all of
      // it is secret. (A database URL's is a user name.) An '@' past the first '/' is in
      // the path, not userinfo.
      std::string scheme_name(text.substr(0, scheme));
      for (auto& c : scheme_name)
        c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      const bool http = scheme_name == "http" || scheme_name == "https";
      const auto user = text.substr(authority, at - authority);
      if (!http || user.empty() || user.find('/') != std::string_view::npos) return {0, 0};
      return {authority, at - authority};
    }
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
      // Up to the next " key=" (a bare password written with a space in it is still
      // the password, though libpq would read its tail as a key).
      while (end < text.size()) {
        if (text[end] == ' ') {
          std::size_t k = end;
          while (k < text.size() && text[k] == ' ') ++k;
          std::size_t word = k;
          while (word < text.size() &&
                 (std::isalnum(static_cast<unsigned char>(text[word])) || text[word] == '_'))
            ++word;
          std::size_t eq = word;
          while (eq < text.size() && text[eq] == ' ') ++eq;
          if (word > k && eq < text.size() && text[eq] == '=') break;
        }
        ++end;
      }
      while (end > i && text[end - 1] == ' ') --end;
    }
    return {i, end - i};
  }
  // user:password@host typed without its scheme: still a password.
  if (const auto at = text.rfind('@'); at != std::string_view::npos) {
    const auto colon = text.find(':');
    if (colon != std::string_view::npos && colon < at &&
        text.substr(0, colon).find_first_of("= /") == std::string_view::npos)
      return {colon + 1, at - colon - 1};
  }
  return {0, 0};
}

// Case-insensitive: drivers lowercase host names, and a split password can be one.
void replace_all(std::string& text, const std::string& what) {
  if (what.empty()) return;
  auto lower = [](char c) {
    return static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  };
  for (std::size_t at = 0; at + what.size() <= text.size();) {
    bool same = true;
    for (std::size_t i = 0; i < what.size() && same; ++i)
      same = lower(text[at + i]) == lower(what[i]);
    if (!same) {
      ++at;
      continue;
    }
    text.replace(at, what.size(), "***");
    at += 3;
  }
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
    if (c == '@' || c == '/' || c == ':' || c == '#' || c == '?' || c == ' ') {
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
