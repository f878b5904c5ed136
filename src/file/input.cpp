#include "file/input.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace sluice::file {
namespace {
constexpr std::size_t kReadChunk = 64 * 1024;
}  // namespace

std::optional<Line> Input::next_line(std::size_t max_line_bytes, std::string& error) {
  for (;;) {
    const auto rest = pending();
    const auto newline = rest.find('\n');
    if (newline != std::string_view::npos) {
      Line out;
      out.number = ++line;
      out.end = taken + newline + 1;
      if (overlong) {
        out.body = std::move(overlong_head);
        out.overlong = true;
        overlong = false;
        overlong_head.clear();
      } else if (newline > max_line_bytes) {  // whole in the buffer, but too long
        out.body.assign(rest.substr(0, kOverlongKept));
        out.overlong = true;
      } else {
        out.body.assign(rest.substr(0, newline));
        if (!out.body.empty() && out.body.back() == '\r') out.body.pop_back();
      }
      taken = out.end;
      carry_at += newline + 1;
      if (carry_at > kReadChunk) {  // keep the carry small
        carry.erase(0, carry_at);
        carry_at = 0;
      }
      partial_size = 0;
      return out;
    }
    if (rest.size() > max_line_bytes) {  // drop all but its head
      if (!overlong) {
        overlong = true;
        overlong_head.assign(rest.substr(0, kOverlongKept));
      }
      taken += rest.size();
      carry.clear();
      carry_at = 0;
    }
    if (!read_more(error)) return std::nullopt;
  }
}

bool Input::read_more(std::string& error) {
  if (closed) return false;
  char chunk[kReadChunk];
  for (;;) {
    const auto n = ::read(fd, chunk, sizeof chunk);
    if (n > 0) {
      carry.append(chunk, static_cast<std::size_t>(n));
      at_end = false;
      return true;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      at_end = true;
      return false;
    }
    if (n < 0) error = "cannot read " + path + " (" + std::strerror(errno) + ")";
    if (pipe) closed = true;  // a pipe's end is final
    at_end = true;
    return false;
  }
}

std::optional<Line> Input::take_partial() {
  const auto rest = pending();
  if (rest.empty() && !overlong) return std::nullopt;
  Line out;
  out.number = ++line;
  out.end = taken + rest.size();
  if (overlong) {
    out.body = std::move(overlong_head);
    out.overlong = true;
    overlong = false;
  } else {
    out.body.assign(rest);
    if (!out.body.empty() && out.body.back() == '\r') out.body.pop_back();
  }
  taken = out.end;
  carry.clear();
  carry_at = 0;
  partial_size = 0;
  return out;
}

std::optional<Line> Input::partial_if_settled(std::chrono::milliseconds wait) {
  const auto size = pending().size();
  if (size == 0 && !overlong) return std::nullopt;
  const auto now = std::chrono::steady_clock::now();
  if (size != partial_size) {
    partial_size = size;
    partial_since = now;
    return std::nullopt;
  }
  if (now - partial_since < wait) return std::nullopt;
  return take_partial();
}

}  // namespace sluice::file
