// Which files source.file.path names and where their checkpoint is, and the file
// source's options checked.
#include <glob.h>

#include <filesystem>

#include "file/file_source.hpp"
#include "sluice/option_error.hpp"

namespace sluice {
namespace file {

bool is_glob(const std::string& path) {
  return path.find_first_of("*?[") != std::string::npos;
}

std::vector<std::string> matching_files(const std::string& path) {
  std::vector<std::string> files;
  if (!is_glob(path)) {
    std::error_code ec;
    if (std::filesystem::is_regular_file(path, ec)) files.push_back(path);
    return files;
  }
  glob_t found{};
  if (::glob(path.c_str(), 0, nullptr, &found) == 0)  // sorted by name
    for (std::size_t i = 0; i < found.gl_pathc; ++i) {
      std::error_code ec;
      if (std::filesystem::is_regular_file(found.gl_pathv[i], ec))
        files.emplace_back(found.gl_pathv[i]);
    }
  globfree(&found);
  return files;
}

std::string checkpoint_path(const FileSourceOptions& options) {
  if (!options.checkpoint.empty()) return options.checkpoint;
  if (options.path == "-" || is_glob(options.path)) return {};
  return options.path + ".checkpoint";
}

}  // namespace file

namespace {
[[noreturn]] void bad_option(const std::string& name, const std::string& value,
                             const std::string& expected) {
  throw OptionError("file source", name, value, expected);
}
}  // namespace

void validate(const FileSourceOptions& o) {
  if (o.path.empty()) bad_option("path", "(empty)", "a file, a glob or - (standard input)");
  if (file::is_glob(o.path) && o.checkpoint.empty())
    bad_option("checkpoint", "(empty)",
               "a checkpoint file: path is a glob, whose files share one checkpoint");
  if (o.path == "-" && !o.checkpoint.empty())
    bad_option("checkpoint", "'" + o.checkpoint + "'", "none: standard input cannot be read again");
  if (o.max_batch < 1 || o.max_batch > 10000)
    bad_option("max_batch", std::to_string(o.max_batch), "1..10000");
  if (o.poll_interval < std::chrono::milliseconds(1))
    bad_option("poll_interval", std::to_string(o.poll_interval.count()) + " ms", "at least 1 ms");
  if (o.checkpoint_interval < std::chrono::milliseconds(1))
    bad_option("checkpoint_interval", std::to_string(o.checkpoint_interval.count()) + " ms",
               "at least 1 ms");
  if (o.partial_line_wait < std::chrono::milliseconds(0))
    bad_option("partial_line_wait", std::to_string(o.partial_line_wait.count()) + " ms",
               "0 or more");
  if (o.max_line_bytes < 1) bad_option("max_line_bytes", "0", "at least 1");
}

}  // namespace sluice
