// A sink of this distribution's own: each table a file of JSON lines in one folder,
// written idempotently by the records' content hash (a record already in its file is a
// duplicate, not a second line). Records, rejects and positions stay in that folder,
// as a database keeps them in its tables: `my-sluice rejects list` reads them back.
// Only the installed driver SPI is used (sluice/driver/).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sluice/driver/sink_driver.hpp>
#include <string>

namespace my {
namespace {
namespace fs = std::filesystem;
using namespace sluice::sinks;
using sluice::config::ConfigError;
using sluice::config::Value;

struct NdjsonSettings : SinkSettings {
  std::string directory = ".";
  bool fsync = true;
  std::string hash_field, table, rejects_table;
  std::vector<std::string> routes;  // tables of Record::route 1, 2, ...
};

std::string now_rfc3339() {
  const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return text;
}

// Appends `text` to `path` and makes it durable, or leaves the file as it was: a write
// or sync that fails cuts the file back, so that the batch, tried again, is not there
// twice. (A crash mid-write leaves a last line without its newline, which open() drops.)
void append(const fs::path& path, const std::string& text, bool sync) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0)
    throw SinkError("ndjson: cannot open " + path.string() + ": " + std::strerror(errno),
                    SinkFailure::unavailable);
  const off_t before = ::lseek(fd, 0, SEEK_END);
  std::string failed;
  for (std::size_t done = 0; done < text.size() && failed.empty();) {
    const auto n = ::write(fd, text.data() + done, text.size() - done);
    if (n >= 0)
      done += static_cast<std::size_t>(n);
    else if (errno != EINTR)
      failed = "cannot write " + path.string() + ": " + std::strerror(errno);
  }
  if (failed.empty() && sync && ::fdatasync(fd) != 0)
    failed = "cannot sync " + path.string() + ": " + std::strerror(errno);
  if (!failed.empty() && (before < 0 || ::ftruncate(fd, before) != 0))
    failed += " (and the file could not be cut back: a line may be there twice)";
  ::close(fd);
  if (!failed.empty()) throw SinkError("ndjson: " + failed);
}

// The complete lines of a file (a torn last line is cut off, so that the next append
// starts a line of its own).
std::vector<std::string> read_lines(const fs::path& path) {
  std::vector<std::string> lines;
  std::ifstream in(path, std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::size_t start = 0;
  for (auto end = all.find('\n'); end != std::string::npos; end = all.find('\n', start)) {
    lines.push_back(all.substr(start, end - start));
    start = end + 1;
  }
  if (start < all.size()) fs::resize_file(path, start);
  return lines;
}

class NdjsonSink final : public Sink {
 public:
  explicit NdjsonSink(NdjsonSettings settings) : s_(std::move(settings)) {}

  void open() override {
    std::error_code ec;
    fs::create_directories(s_.directory, ec);
    if (!fs::is_directory(s_.directory))
      throw SinkError("ndjson: sink.ndjson.directory '" + s_.directory + "' is not a folder",
                      SinkFailure::unavailable);
    hashes_.assign(1 + s_.routes.size(), {});
    for (std::size_t route = 0; route < hashes_.size(); ++route)
      for (const auto& line : read_lines(table_file(route))) {
        const auto document = nlohmann::json::parse(line, nullptr, false);
        if (document.is_object() && document.contains(s_.hash_field))
          hashes_[route].insert(document[s_.hash_field].get<std::string>());
      }
    rejects_.clear();
    for (const auto& line : read_lines(rejects_file())) {
      const auto row = nlohmann::json::parse(line, nullptr, false);
      if (row.is_object()) rejects_.insert(reject_key(row));
    }
  }

  WriteResult write(std::span<const sluice::pipeline::Record> records) override {
    WriteResult result;
    std::map<std::size_t, std::string> lines;  // by route
    std::vector<std::set<std::string>> fresh(hashes_.size());
    for (const auto& record : records) {
      const bool seen = hashes_[record.route].count(record.hash) ||
                        !fresh[record.route].insert(record.hash).second;
      result.outcomes.push_back(seen ? WriteOutcome::duplicate : WriteOutcome::inserted);
      if (!seen) lines[record.route] += record.document.dump() + "\n";
    }
    // A route's hashes are known written once its own append is: a batch failing at a
    // later file, tried again, does not append this one twice.
    for (const auto& [route, text] : lines) {
      append(table_file(route), text, s_.fsync);
      hashes_[route].merge(fresh[route]);
    }
    return result;
  }

  void write_rejects(std::span<const RejectRow> rows) override {
    std::string text;
    for (const auto& r : rows) {
      nlohmann::json row = {{"id", std::to_string(next_reject_id())},
                            {"message_id", r.message_id},
                            {"reason", r.reason},
                            {"detail", r.detail},
                            {"body", r.body},
                            {"source", r.source},
                            {"properties", r.properties},
                            {"pipeline", r.pipeline},
                            {"rejected_at", now_rfc3339()}};
      if (rejects_.insert(reject_key(row)).second) text += row.dump() + "\n";
    }
    if (!text.empty()) append(rejects_file(), text, s_.fsync);
  }

  std::vector<StoredReject> read_rejects(const RejectQuery& query) override {
    std::map<std::string, std::string> replayed;  // id -> when
    for (const auto& line : read_lines(replayed_file())) {
      const auto tab = line.find('\t');
      replayed[line.substr(0, tab)] = tab == std::string::npos ? "" : line.substr(tab + 1);
    }
    std::vector<StoredReject> out;
    for (const auto& line : read_lines(rejects_file())) {
      const auto row = nlohmann::json::parse(line, nullptr, false);
      if (!row.is_object()) continue;
      StoredReject stored;
      stored.id = row.value("id", "");
      if (!query.after_id.empty() && std::stoll(stored.id) <= std::stoll(query.after_id)) continue;
      stored.row = {row.value("message_id", ""), row.value("reason", ""),
                    row.value("detail", ""),     row.value("body", ""),
                    row.value("source", ""),     row.value("properties", ""),
                    row.value("pipeline", "")};
      stored.rejected_at = row.value("rejected_at", "");
      if (const auto it = replayed.find(stored.id); it != replayed.end())
        stored.replayed_at = it->second;
      if (!query.reason.empty() && stored.row.reason != query.reason) continue;
      if (!query.pipeline.empty() && stored.row.pipeline != query.pipeline) continue;
      if (!query.replayed && !stored.replayed_at.empty()) continue;
      out.push_back(std::move(stored));
      if (out.size() >= query.limit) break;
    }
    return out;
  }

  void mark_replayed(std::span<const std::string> ids) override {
    std::string text;
    const auto now = now_rfc3339();
    for (const auto& id : ids) text += id + "\t" + now + "\n";
    append(replayed_file(), text, s_.fsync);
  }

  std::uint64_t count_records() override {
    if (hashes_.empty()) open();
    std::uint64_t n = 0;
    for (const auto& h : hashes_) n += h.size();
    return n;
  }

  std::optional<std::string> load_position(const std::string& key) override {
    const auto positions = read_positions();
    if (!positions.contains(key)) return std::nullopt;
    return positions[key].get<std::string>();
  }
  void save_position(const std::string& key, const std::string& value) override {
    auto positions = read_positions();
    positions[key] = value;
    const auto file = fs::path(s_.directory) / "sluice_positions.json";
    const auto temporary = fs::path(file.string() + ".tmp");
    fs::remove(temporary);
    append(temporary, positions.dump(), s_.fsync);
    fs::rename(temporary, file);
  }

  std::string describe() const override { return "ndjson " + s_.directory; }

 private:
  fs::path table_file(std::size_t route) const {
    return fs::path(s_.directory) / ((route == 0 ? s_.table : s_.routes[route - 1]) + ".ndjson");
  }
  fs::path rejects_file() const { return fs::path(s_.directory) / (s_.rejects_table + ".ndjson"); }
  fs::path replayed_file() const {
    return fs::path(s_.directory) / (s_.rejects_table + ".replayed");
  }
  static std::string reject_key(const nlohmann::json& row) {
    return row.value("pipeline", "") + '\n' + row.value("message_id", "") + '\n' +
           row.value("reason", "") + '\n' + row.value("body", "");
  }
  long long next_reject_id() {
    if (last_reject_id_ < 0) {
      last_reject_id_ = 0;
      for (const auto& line : read_lines(rejects_file())) {
        const auto row = nlohmann::json::parse(line, nullptr, false);
        if (row.is_object())
          last_reject_id_ = std::max(last_reject_id_, std::stoll(row.value("id", "0")));
      }
    }
    return ++last_reject_id_;
  }
  nlohmann::json read_positions() const {
    std::ifstream in(fs::path(s_.directory) / "sluice_positions.json");
    if (!in) return nlohmann::json::object();
    auto positions = nlohmann::json::parse(in, nullptr, false);
    return positions.is_object() ? positions : nlohmann::json::object();
  }

  NdjsonSettings s_;
  std::vector<std::set<std::string>> hashes_;  // by route
  std::set<std::string> rejects_;
  long long last_reject_id_ = -1;
};

class NdjsonDriver final : public SinkDriverOf<NdjsonSettings> {
 public:
  std::string_view name() const override { return "ndjson"; }
  std::string_view doc() const override {
    return "Files of JSON lines, one per table in `sink.ndjson.directory`, idempotent by the "
           "content hash (an example of a sink driver built outside Sluice's tree).";
  }
  const std::vector<SinkOption>& options() const override {
    using S = NdjsonSettings;
    using namespace sluice::config;
    static const std::vector<SinkOption> rows = {
        option<S>("directory", "string", ".", "The folder of the files (made if missing).",
                  [](S& s, const Value& v, const std::string& k) {
                    s.directory = as_string(v, k);
                    if (s.directory.empty()) bad(k, v, "a folder");
                  }),
        option<S>("fsync", "boolean", "true", "Each batch is made durable before it is acked.",
                  [](S& s, const Value& v, const std::string& k) { s.fsync = as_bool(v, k); }),
    };
    return rows;
  }
  void finalize(SinkSettings& settings, SinkPipeline& pipeline) const override {
    auto& s = of(settings);
    // Each table is a file in the folder: a name that would leave it, or make no file
    // name, is refused here rather than failing every write.
    auto file_name = [](const std::string& key, const std::string& table) {
      if (table.empty() || table.front() == '.' ||
          table.find_first_of("/\\") != std::string::npos || table.find('\0') != std::string::npos)
        throw ConfigError(key + ": got '" + table +
                          "', expected a table name the ndjson sink can make a file of in "
                          "sink.ndjson.directory (no /, no leading .)");
    };
    file_name("sink.table", pipeline.table);
    file_name("sink.rejects_table", pipeline.rejects_table);
    for (const auto& route : pipeline.routes) file_name("route.tables", route);
    s.hash_field = pipeline.hash_field;
    s.table = pipeline.table;
    s.rejects_table = pipeline.rejects_table;
    s.routes = pipeline.routes;
    pipeline.writers = 1;  // one appender per file
  }
  Factory factory(const SinkSettings& settings) const override {
    return [s = of(settings)] { return std::make_unique<NdjsonSink>(s); };
  }
  std::string_view db_system() const override { return "ndjson"; }
  std::string describe(const SinkSettings& settings) const override {
    return "ndjson " + of(settings).directory;
  }
  std::string rejects_place(const SinkSettings& settings) const override {
    return fs::weakly_canonical(fs::absolute(of(settings).directory)).string() + " " +
           of(settings).rejects_table;
  }
  std::optional<Exclusive> exclusive(const SinkSettings& settings) const override {
    const auto& directory = of(settings).directory;
    return Exclusive{"sink.ndjson.directory", directory,
                     fs::weakly_canonical(fs::absolute(directory)).string(),
                     "ndjson folder (one writer each)"};
  }
};

}  // namespace

const SinkDriver& ndjson_sink_driver() {
  static const NdjsonDriver driver;
  return driver;
}

}  // namespace my
