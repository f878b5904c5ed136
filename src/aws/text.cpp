#include "aws/text.hpp"

namespace sluice::text {
namespace {
bool unreserved(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_' || c == '.' || c == '~';
}
int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
}  // namespace

std::string encode_form(const std::vector<std::pair<std::string, std::string>>& params) {
  // As the AWS SDKs write forms (Python's urlencode): percent-encoding, a space as '+'.
  auto append = [](std::string& out, std::string_view part) {
    const std::string encoded = uri_encode(part, false);
    for (std::size_t i = 0; i < encoded.size(); ++i) {
      if (encoded.compare(i, 3, "%20") == 0) {
        out += '+';
        i += 2;
      } else {
        out += encoded[i];
      }
    }
  };
  std::string out;
  for (const auto& [name, value] : params) {
    if (!out.empty()) out += '&';
    append(out, name);
    out += '=';
    append(out, value);
  }
  return out;
}

std::string uri_encode(std::string_view in, bool keep_slash) {
  static constexpr char digits[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(in.size() * 3 / 2);
  for (unsigned char c : in) {
    if (unreserved(c) || (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += digits[c >> 4];
      out += digits[c & 0xf];
    }
  }
  return out;
}

std::string uri_decode(std::string_view in) {
  std::string out;
  out.reserve(in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '%' && i + 2 < in.size()) {
      const int hi = hex_value(in[i + 1]);
      const int lo = hex_value(in[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out += static_cast<char>(hi * 16 + lo);
        i += 2;
        continue;
      }
    }
    out += in[i];
  }
  return out;
}

std::string to_lower(std::string_view in) {
  std::string out(in);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

std::string_view trim(std::string_view in) {
  const auto first = in.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return {};
  const auto last = in.find_last_not_of(" \t\r\n");
  return in.substr(first, last - first + 1);
}

std::vector<std::string_view> split(std::string_view in, char separator) {
  std::vector<std::string_view> parts;
  std::size_t pos = 0;
  while (true) {
    const std::size_t next = in.find(separator, pos);
    parts.push_back(in.substr(pos, next == std::string_view::npos ? next : next - pos));
    if (next == std::string_view::npos) break;
    pos = next + 1;
  }
  return parts;
}

}  // namespace sluice::text
