// The file driver: source.file.*, a probe that checks the path at start and passes on
// the source's own count of lines left, and no figures beyond the core's.
#include "file/driver.hpp"

#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <thread>

#include "common/thread_name.hpp"

namespace sluice::file {
using namespace config;
using std::chrono::milliseconds;
using std::chrono::seconds;

namespace {

std::vector<driver::SourceOption> file_options() {
  using driver::option;
  using S = FileSettings;
  return {
      option<S>(
          "path", "string", "",
          "The JSON-lines input (required): a file, a glob such as events/*.jsonl (its files in "
          "name order), or - for standard input. One message per non-blank line.",
          [](S& s, auto& n, auto& k) { s.source.path = as_string(n, k); }, "SLUICE_FILE_PATH"),
      option<S>(
          "checkpoint", "string", "",
          "Where the acked prefix of each file is kept, to resume after a stop or a crash; "
          "empty: PATH.checkpoint for one file (required for a glob; none for standard input).",
          [](S& s, auto& n, auto& k) { s.source.checkpoint = as_string(n, k); },
          "SLUICE_FILE_CHECKPOINT"),
      option<S>("follow", "boolean", "false",
                "At the end of the input, keep waiting for more lines and (a glob) for new files "
                "that sort after the last one; a file truncated or replaced is read again from "
                "its start (tail -F). Lines appended to an earlier file of a glob are not read. "
                "false: the input ends there (--until-drained then stops).",
                [](S& s, auto& n, auto& k) { s.source.follow = as_bool(n, k); }),
      option<S>("max_batch", "integer", "100", "Lines per receive (at most max_in_flight).",
                [](S& s, auto& n, auto& k) {
                  s.source.max_batch = static_cast<int>(as_int(n, k, 1, 10000));
                }),
      option<S>("poll_interval", "duration", "200ms",
                "At the end of the input, how often it is looked at again.",
                [](S& s, auto& n, auto& k) {
                  s.source.poll_interval = as_duration(n, k, milliseconds(1), seconds(60));
                }),
      option<S>("partial_line_wait", "duration", "5s",
                "A last line without its newline is waited for (a writer still appending); once "
                "the file has not grown for this long it is taken as it is.",
                [](S& s, auto& n, auto& k) {
                  s.source.partial_line_wait = as_duration(n, k, milliseconds(0), seconds(3600));
                }),
      option<S>("checkpoint_interval", "duration", "500ms",
                "How often the checkpoint is written (atomically) while lines are acked; always "
                "at stop. After a crash, lines acked since are read again (and deduped).",
                [](S& s, auto& n, auto& k) {
                  s.source.checkpoint_interval = as_duration(n, k, milliseconds(1), seconds(3600));
                }),
      option<S>("max_line_bytes", "integer", "0",
                "A longer line is rejected (reason line_too_long) with its first kilobyte, "
                "never held whole; 0: decode.max_body_bytes.",
                [](S& s, auto& n, auto& k) {
                  s.source.max_line_bytes =
                      static_cast<std::size_t>(as_int(n, k, 0, std::int64_t{1} << 30));
                }),
  };
}

// The path at start; then the source's own figures, twice a second.
class FileProbe final : public driver::QueueProbe {
 public:
  explicit FileProbe(const FileSettings& settings)
      : options_(settings.source), progress_(settings.progress) {}
  ~FileProbe() override { stop(); }

  // Everything a run needs of its files, said at start (exit 2) rather than as
  // warnings forever.
  int check_at_start(bool wait_for_queue, const std::function<bool()>&) override {
    if (options_.path == "-") return 0;
    const std::string path_key = "sluice: source.file.path (SLUICE_FILE_PATH): ";
    const std::string checkpoint_key = "sluice: source.file.checkpoint (SLUICE_FILE_CHECKPOINT): ";
    std::error_code ec;
    if (std::filesystem::is_directory(options_.path, ec)) {
      std::cerr << path_key << "'" << options_.path
                << "' is a directory, expected a file or a glob such as " << options_.path
                << "/*.jsonl\n";
      return 2;
    }
    if (const auto checkpoint = checkpoint_path(options_); !checkpoint.empty()) {
      try {
        read_checkpoint(checkpoint);
      } catch (const std::exception& e) {
        std::cerr << checkpoint_key << e.what() << "\n";
        return 2;
      }
      // Written beside itself (a temporary file renamed over it): its folder must take it.
      auto folder = std::filesystem::path(checkpoint).parent_path();
      if (folder.empty()) folder = ".";
      if (!std::filesystem::is_directory(folder, ec) || ::access(folder.c_str(), W_OK) != 0) {
        std::cerr << checkpoint_key << "'" << checkpoint << "': its folder " << folder
                  << " is missing or not writable, expected a folder this process can write\n";
        return 2;
      }
    }
    const auto files = matching_files(options_.path);
    if (files.empty() && !wait_for_queue) {
      std::cerr << path_key << "no file matches '" << options_.path
                << "' (set source.wait_for_queue: true to wait for it)\n";
      return 2;
    }
    for (const auto& file : files)
      if (::access(file.c_str(), R_OK) != 0) {
        std::cerr << path_key << "'" << file << "' cannot be read (" << std::strerror(errno)
                  << ")\n";
        return 2;
      }
    return 0;
  }

  void start(driver::QueueCounts& counts) override {
    thread_ = std::thread([this, &counts] {
      common::name_this_thread("sluice-probe");
      std::unique_lock lock(mutex_);
      while (!stopping_) {
        const long ready = progress_->ready.load();
        if (ready >= 0 || options_.path == "-") {  // -1 before the source's first look
          counts.ready = ready;
          counts.in_flight = progress_->in_flight.load();
          counts.read_at_ns = std::chrono::steady_clock::now().time_since_epoch().count();
        }
        wake_.wait_for(lock, milliseconds(250), [&] { return stopping_; });
      }
    });
  }

  void stop() override {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  const FileSourceOptions options_;
  const std::shared_ptr<Progress> progress_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

class FileDriver final : public driver::DriverOf<FileSettings> {
 public:
  std::string_view name() const override { return "file"; }
  std::string_view doc() const override {
    return "JSON lines from files (a file, a glob, standard input) read as a queue: each line a "
           "message, acked lines kept as a checkpoint so that a restart resumes where the last "
           "run stopped. PostgreSQL and SQLite also save the files' position in each batch's "
           "transaction (sluice_positions), so that after a crash nothing is read twice "
           "(handlers inline, the default); "
           "otherwise lines acked since the last checkpoint are read again and deduped by the "
           "sink. For backfills and for replaying a rejects export.";
  }
  const std::vector<driver::SourceOption>& options() const override {
    static const auto table = file_options();
    return table;
  }

  void finalize(driver::SourceSettings& settings, driver::PipelineSettings& p) const override {
    auto& o = of(settings).source;
    // A line decode would refuse anyway is not held whole on the way.
    if (o.max_line_bytes == 0) o.max_line_bytes = p.max_body_bytes;
    if (o.path.empty())
      throw ConfigError(
          "source.file.path: missing, expected a file, a glob or - (source.type is file)");
    try {
      validate(o);
    } catch (const OptionError& e) {
      throw_as_config_error(e, "source.file.");
    }
  }

  SourceFactory factory(const driver::SourceSettings& s) const override {
    return make_file_source(of(s).source, of(s).progress);
  }
  std::unique_ptr<driver::QueueProbe> probe(const driver::SourceSettings& s) const override {
    return std::make_unique<FileProbe>(of(s));
  }
  const std::vector<driver::SourceFigure>& figures() const override {
    static const std::vector<driver::SourceFigure> none;
    return none;
  }
  bool dead_letters(const driver::SourceSettings&) const override { return false; }
  std::vector<std::pair<std::string, std::string>> reject_reasons() const override {
    return {{"line_too_long", "a line longer than `source.file.max_line_bytes`"}};
  }

  std::string describe(const driver::SourceSettings& s, const ContainerOptions& c) const override {
    const auto& o = of(s).source;
    const auto checkpoint = checkpoint_path(o);
    return "file " + o.path + (o.follow ? " (following" : " (") + (o.follow ? ", " : "") +
           "checkpoint " + (checkpoint.empty() ? "none" : checkpoint) + ", max_in_flight " +
           std::to_string(c.max_in_flight) + ")";
  }
  std::string queue_name(const driver::SourceSettings& s) const override {
    return of(s).source.path;
  }
};

}  // namespace

const driver::SourceDriver& file_source_driver() {
  static const FileDriver driver;
  return driver;
}

}  // namespace sluice::file
