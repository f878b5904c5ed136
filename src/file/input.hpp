#pragma once
// One input of the file source (a file, or standard input) and its lines: the bytes
// read and not yet lines, whole lines taken from them, a last line without its newline
// taken once it stops growing, and a line too long cut to its head.
#include <boost/asio/posix/stream_descriptor.hpp>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "file/file_source.hpp"

namespace sluice::file {

// What is kept of a line longer than max_line_bytes: its head, for the reject.
inline constexpr std::size_t kOverlongKept = 1024;

struct Line {
  std::size_t input = 0;
  std::uint64_t number = 0;
  std::uint64_t end = 0;
  std::string body;
  bool overlong = false;
};

// The I/O thread's alone.
struct Input {
  std::string path;
  Position start;                // where reading begins (from the checkpoint) once it is opened
  std::uint64_t size_found = 0;  // its size when it was found (the backlog until opened)
  bool opened = false;
  bool finished = false;    // read to its end and closed (a later input exists)
  std::uint64_t inode = 0;  // of the file opened (0: not yet)
  int fd = -1;
  bool owns_fd = true;
  bool pipe = false;  // standard input that is not a regular file: read when ready
  std::optional<boost::asio::posix::stream_descriptor> descriptor;  // for a pipe
  std::uint64_t taken = 0;  // file offset of the first byte not yet in a line
  std::uint64_t line = 0;   // lines taken
  std::string carry;        // bytes read, not yet lines
  std::size_t carry_at = 0;
  bool at_end = false;           // the latest read found nothing more
  bool closed = false;           // a pipe's writer is gone
  std::size_t partial_size = 0;  // carry's size when the partial line last grew
  std::chrono::steady_clock::time_point partial_since{};  // ... and when
  bool overlong = false;                                  // discarding a line beyond max_line_bytes
  std::string overlong_head;

  ~Input() {
    if (descriptor) descriptor->release();
    if (fd >= 0 && owns_fd) ::close(fd);
  }
  std::string_view pending() const { return std::string_view(carry).substr(carry_at); }

  // The next whole line, reading more as needed; nothing at its end for now. A line
  // longer than `max_line_bytes` comes back `overlong`, with its head only. `error`:
  // why a read failed (the input is then at its end).
  std::optional<Line> next_line(std::size_t max_line_bytes, std::string& error);
  // The bytes after the last newline of a complete input: its last line.
  std::optional<Line> take_partial();
  // A last line without its newline: taken once it has not grown for `wait` (a writer
  // still appending finishes it first).
  std::optional<Line> partial_if_settled(std::chrono::milliseconds wait);

 private:
  // Appends what the input has now; false when it has nothing more for now.
  bool read_more(std::string& error);
};

}  // namespace sluice::file
