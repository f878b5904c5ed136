#pragma once
// The file source's parts that its driver shares (sluice/file/source.hpp is the
// library's face).

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/file/source.hpp"

namespace sluice::file {

// What the source knows of its input, for the driver's queue probe. Any thread.
struct Progress {
  std::atomic<long> ready{-1};     // lines not yet read (estimated from the bytes left)
  std::atomic<long> in_flight{0};  // lines read and not yet done (retries included)
};

SourceFactory make_file_source(FileSourceOptions options, std::shared_ptr<Progress> progress);

bool is_glob(const std::string& path);
// The regular files a path or glob names now, in name order.
std::vector<std::string> matching_files(const std::string& path);
// options.checkpoint, or its default; empty: no checkpoint (standard input).
std::string checkpoint_path(const FileSourceOptions& options);

// Where each file was done: lines and the byte after the last of them.
struct Position {
  std::uint64_t line = 0;
  std::uint64_t offset = 0;
  std::uint64_t inode = 0;  // of the file read (0: unknown): another file is read anew
};
// Throws std::runtime_error naming the file and what is wrong; a missing file is an
// empty checkpoint.
// `saved_at`: when it was written (ms since the epoch; 0: not said, an earlier release's).
std::map<std::string, Position> read_checkpoint(const std::string& path,
                                                std::uint64_t* saved_at = nullptr);
// The same from the file's text (`path` names it in errors).
std::map<std::string, Position> parse_checkpoint(std::string_view text, const std::string& path,
                                                 std::uint64_t* saved_at = nullptr);
// Its text (JSON, version 1), saved now.
std::string format_checkpoint(const std::map<std::string, Position>& files);
// Atomically: a temporary file beside it, flushed to disk, renamed over it.
void write_checkpoint(const std::string& path, const std::map<std::string, Position>& files);

}  // namespace sluice::file
