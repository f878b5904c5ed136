// The file source's checkpoint: per file, the lines done and the byte after them, as
// JSON, replaced atomically. Parsing is apart from the I/O so that it can be fuzzed.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "file/file_source.hpp"

namespace sluice::file {

std::map<std::string, Position> read_checkpoint(const std::string& path, std::uint64_t* saved_at) {
  std::map<std::string, Position> files;
  std::ifstream in(path);
  if (!in) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) return files;  // a first run
    throw std::runtime_error("checkpoint " + path + ": cannot read it (" + std::strerror(errno) +
                             ")");
  }
  std::stringstream text;
  text << in.rdbuf();
  return parse_checkpoint(text.str(), path, saved_at);
}

std::map<std::string, Position> parse_checkpoint(std::string_view text, const std::string& path,
                                                 std::uint64_t* saved_at) {
  std::map<std::string, Position> files;
  const auto doc = nlohmann::json::parse(text, nullptr, false);
  auto malformed = [&](const std::string& why) {
    return std::runtime_error("checkpoint " + path + ": " + why +
                              " (expected {\"version\": 1, \"files\": {PATH: {\"line\": N, "
                              "\"offset\": N}}}; remove it to read every file from its start)");
  };
  if (doc.is_discarded() || !doc.is_object()) throw malformed("not a JSON object");
  const auto version = doc.find("version");
  if (version == doc.end() || !version->is_number_integer() || *version != 1)
    throw malformed("not version 1");
  if (saved_at) {
    const auto at = doc.find("saved_at");
    *saved_at = at != doc.end() && at->is_number_unsigned() ? at->get<std::uint64_t>() : 0;
  }
  const auto it = doc.find("files");
  if (it == doc.end() || !it->is_object()) throw malformed("no \"files\" object");
  for (const auto& [name, at] : it->items()) {
    if (!at.is_object() || !at.contains("line") || !at.contains("offset") ||
        !at["line"].is_number_unsigned() || !at["offset"].is_number_unsigned())
      throw malformed("the entry of " + name + " is not {\"line\": N, \"offset\": N}");
    Position position{at["line"].get<std::uint64_t>(), at["offset"].get<std::uint64_t>()};
    if (const auto inode = at.find("inode"); inode != at.end()) {
      if (!inode->is_number_unsigned())
        throw malformed("the inode of " + name + " is not a number");
      position.inode = inode->get<std::uint64_t>();
    }
    if (position.offset < position.line)  // every line ends with at least its newline
      throw malformed("the entry of " + name + " has fewer bytes than lines");
    files[name] = position;
  }
  return files;
}

std::string format_checkpoint(const std::map<std::string, Position>& files) {
  const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  nlohmann::json doc = {{"version", 1},
                        {"saved_at", static_cast<std::uint64_t>(now)},
                        {"files", nlohmann::json::object()}};
  for (const auto& [name, at] : files)
    doc["files"][name] = {{"line", at.line}, {"offset", at.offset}, {"inode", at.inode}};
  return doc.dump(1) + "\n";
}

void write_checkpoint(const std::string& path, const std::map<std::string, Position>& files) {
  const std::string text = format_checkpoint(files);
  const std::string temporary = path + ".tmp";
  auto fail = [&](const char* what) {
    return std::runtime_error("checkpoint " + path + ": " + what + " (" + std::strerror(errno) +
                              ")");
  };
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw fail("cannot create its temporary file");
  std::size_t written = 0;
  while (written < text.size()) {
    const auto n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      throw fail("cannot write it");
    }
    written += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) {
    ::close(fd);
    throw fail("cannot flush it to disk");
  }
  ::close(fd);
  if (::rename(temporary.c_str(), path.c_str()) != 0) throw fail("cannot rename it into place");
  // The rename itself is durable once its folder is flushed.
  const auto folder = std::filesystem::path(path).parent_path();
  const int dir = ::open(folder.empty() ? "." : folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
}

}  // namespace sluice::file
