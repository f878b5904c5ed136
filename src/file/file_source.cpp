// The file source: JSON lines read as a queue whose ack is a checkpoint (see
// sluice/file/source.hpp for what it promises).
//
// Threads: open(), receive(), reject() and flush() run on the container's I/O thread,
// which alone reads the inputs (inputs_, reading_). ack(), retry() and release() come
// from any thread: what they touch (the trackers, the retries, the checkpoint's
// dirtiness) is guarded by mutex_.
#include "file/file_source.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cerrno>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>

#include "file/input.hpp"
#include "runtime/batch_positions.hpp"
#include "runtime/prefix_tracker.hpp"
#include "sluice/spi/source.hpp"

namespace sluice {
namespace asio = boost::asio;
using spi::Delivery;
using spi::SourceError;
using spi::SourceErrorKind;
using Clock = std::chrono::steady_clock;

namespace file {

namespace {

std::string receipt_of(std::size_t input, std::uint64_t line) {
  return std::to_string(input) + ":" + std::to_string(line);
}
std::pair<std::size_t, std::uint64_t> parse_receipt(std::string_view receipt) {
  const auto colon = receipt.find(':');
  return {std::stoull(std::string(receipt.substr(0, colon))),
          std::stoull(std::string(receipt.substr(colon + 1)))};
}

class FileSource final : public spi::Source, private runtime::PositionsOfBatches {
 public:
  FileSource(FileSourceOptions options, spi::SourceContext context,
             std::shared_ptr<Progress> progress)
      : options_(std::move(options)),
        context_(std::move(context)),
        progress_(progress ? std::move(progress) : std::make_shared<Progress>()),
        checkpoint_(checkpoint_path(options_)),
        checkpoint_timer_(context_.executor) {
    // Lines read from a file that can be read again, with a PositionStore: each batch
    // saves how far the files are done with its rows, where the sink can.
    if (!checkpoint_.empty() && context_.positions)
      batch_positions_ = std::make_shared<runtime::SourceBatchPositions>(
          static_cast<runtime::PositionsOfBatches&>(*this));
  }

  ~FileSource() override {
    if (batch_positions_) batch_positions_->detach();
    if (stdin_flags_ >= 0) ::fcntl(STDIN_FILENO, F_SETFL, stdin_flags_);
  }

  // Called again by the container after a failure: starts over from the checkpoint.
  asio::awaitable<void> open() override {
    {
      std::lock_guard lock(mutex_);
      trackers_.clear();
      names_.clear();
      inodes_.clear();
      retries_.clear();
    }
    inputs_.clear();
    reading_ = 0;
    if (options_.path == "-") {
      auto input = std::make_unique<Input>();
      input->path = "-";
      input->fd = STDIN_FILENO;
      input->owns_fd = false;
      struct stat st {};
      if (::fstat(STDIN_FILENO, &st) == 0 && !S_ISREG(st.st_mode)) {
        input->pipe = true;
        stdin_flags_ = ::fcntl(STDIN_FILENO, F_GETFL);
        ::fcntl(STDIN_FILENO, F_SETFL, stdin_flags_ | O_NONBLOCK);
        input->descriptor.emplace(context_.executor, STDIN_FILENO);
      }
      input->opened = true;
      add_input(std::move(input), {});
    } else {
      std::uint64_t saved_at = 0;
      try {
        positions_ = checkpoint_.empty() ? std::map<std::string, Position>{}
                                         : read_checkpoint(checkpoint_, &saved_at);
      } catch (const std::exception& e) {
        throw SourceError(SourceErrorKind::permanent, "checkpoint", e.what());
      }
      if (batch_positions_) resume_from_rows(saved_at);
      const auto files = inputs_matching();
      if (files.empty())  // it may yet be written: tried again with backoff
        throw SourceError(SourceErrorKind::transient, "not_found",
                          "no file matches " + options_.path);
      // Opened one at a time as reading reaches them: a glob of many files holds one
      // descriptor, not one each.
      for (const auto& path : files) add_file(path);
      ensure_open(*inputs_.front());
    }
    checkpoint_loop();
    report();
    co_return;
  }

  spi::SourceCapabilities capabilities() const override {
    spi::SourceCapabilities c;
    c.max_batch = std::max(1, std::min(options_.max_batch, std::max(1, context_.max_in_flight)));
    return c;
  }

  asio::awaitable<std::vector<Delivery>> receive(int max) override {
    std::vector<Delivery> out;
    take_due_retries(out, max);
    read_lines(out, max);
    if (out.empty()) {
      // Nothing now: look again after a while (a writer appending, a retry coming due).
      asio::steady_timer timer(context_.executor);
      timer.expires_after(until_next_look());
      co_await timer.async_wait(asio::use_awaitable);
      if (auto* pipe = waiting_pipe()) {
        // A pipe says when it has more; bounded by one more interval.
        asio::steady_timer bound(context_.executor);
        bound.expires_after(options_.poll_interval);
        bound.async_wait([pipe](boost::system::error_code ec) {
          if (!ec) pipe->descriptor->cancel();
        });
        boost::system::error_code ec;
        co_await pipe->descriptor->async_wait(asio::posix::descriptor_base::wait_read,
                                              asio::redirect_error(asio::use_awaitable, ec));
        bound.cancel();
      }
      take_due_retries(out, max);
      read_lines(out, max);
    }
    report();
    co_return out;
  }

  void ack(const Delivery& state) override { done(state); }

  void retry(const Delivery& state, std::chrono::milliseconds backoff) override {
    again(state, Clock::now() + backoff);
  }
  void release(const Delivery& state) override { again(state, Clock::now()); }

  // No dead-letter destination of its own: the line is done (the rejects table keeps it).
  asio::awaitable<bool> reject(Delivery state, std::string /*reason*/) override {
    done(state);
    co_return false;
  }

  asio::awaitable<void> flush() override {
    save_checkpoint();
    co_return;
  }
  std::shared_ptr<spi::BatchPositions> batch_positions() override { return batch_positions_; }

  std::string describe() const override { return "file " + options_.path; }
  std::string message_source() const override { return options_.path; }

 private:
  // The matching files, not the checkpoint itself (a glob may match it).
  std::vector<std::string> inputs_matching() const {
    auto files = matching_files(options_.path);
    std::erase_if(files, [&](const std::string& f) {
      return !checkpoint_.empty() && (f == checkpoint_ || f == checkpoint_ + ".tmp");
    });
    return files;
  }

  // A file to read, from its checkpoint; opened when reading reaches it.
  void add_file(const std::string& path, std::size_t after = static_cast<std::size_t>(-1)) {
    auto input = std::make_unique<Input>();
    input->path = path;
    if (auto it = positions_.find(path); it != positions_.end()) input->start = it->second;
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0) input->size_found = static_cast<std::uint64_t>(st.st_size);
    const Position at = input->start;
    add_input(std::move(input), at, after);
  }

  // Opens the input and goes to where it begins; false when it cannot be opened now
  // (tried again at the next look).
  bool ensure_open(Input& input) {
    if (input.opened) return true;
    input.fd = ::open(input.path.c_str(), O_RDONLY | O_CLOEXEC);
    if (input.fd < 0) {
      warn("cannot open " + input.path + " (" + std::strerror(errno) + "): tried again");
      return false;
    }
    input.opened = true;
    Position at = input.start;
    struct stat st {};
    if (::fstat(input.fd, &st) == 0) {
      input.inode = static_cast<std::uint64_t>(st.st_ino);
      if (at.inode != 0 && at.inode != input.inode) {
        warn("file " + input.path + " is another file than its checkpoint's (inode " +
             std::to_string(at.inode) + ", now " + std::to_string(input.inode) +
             "): read from its start (the sink dedupes what it already holds)");
        at = {};
      } else if (static_cast<std::uint64_t>(st.st_size) < at.offset) {
        warn("file " + input.path + " is shorter (" + std::to_string(st.st_size) +
             " bytes) than its checkpoint (" + std::to_string(at.offset) +
             "): read from its start (the sink dedupes what it already holds)");
        at = {};
      }
    }
    if (at.offset > 0 && ::lseek(input.fd, static_cast<off_t>(at.offset), SEEK_SET) < 0) {
      warn("cannot seek in " + input.path + " (" + std::strerror(errno) + "): read from its start");
      at = {};
    }
    input.taken = at.offset;
    input.line = at.line;
    std::lock_guard lock(mutex_);
    inodes_[index_of(input)] = input.inode;
    if (at.offset != input.start.offset || at.line != input.start.line)
      trackers_[index_of(input)].resume(at.line, at.offset);
    return true;
  }

  std::size_t index_of(const Input& input) const {
    for (std::size_t i = 0; i < inputs_.size(); ++i)
      if (inputs_[i].get() == &input) return i;
    return inputs_.size();
  }

  // Done with an input whose end is final: its descriptor closed.
  void finish(Input& input) {
    input.finished = true;
    if (input.descriptor) input.descriptor->release(), input.descriptor.reset();
    if (input.fd >= 0 && input.owns_fd) ::close(input.fd);
    input.fd = -1;
  }

  // Adds an input at the end, or right after input `after` (a file found again after
  // it was replaced or truncated: nothing after it has been read, so no receipt names a
  // later index yet).
  void add_input(std::unique_ptr<Input> input, Position at,
                 std::size_t after = static_cast<std::size_t>(-1)) {
    std::lock_guard lock(mutex_);
    const std::size_t at_index = after < inputs_.size() ? after + 1 : inputs_.size();
    runtime::PrefixTracker tracker;
    tracker.resume(at.line, at.offset);
    trackers_.insert(trackers_.begin() + static_cast<long>(at_index), tracker);
    names_.insert(names_.begin() + static_cast<long>(at_index), input->path);
    inodes_.insert(inodes_.begin() + static_cast<long>(at_index),
                   input->opened ? input->inode : input->start.inode);
    inputs_.insert(inputs_.begin() + static_cast<long>(at_index), std::move(input));
  }

  // Reads whole lines into messages, the oldest input first.
  void read_lines(std::vector<Delivery>& out, int max) {
    std::vector<Line> lines;
    while (static_cast<int>(out.size() + lines.size()) < max && reading_ < inputs_.size()) {
      auto& input = *inputs_[reading_];
      if (!ensure_open(input)) break;  // tried again at the next look
      std::string error;
      auto line = input.next_line(options_.max_line_bytes, error);
      if (!error.empty()) warn(error);
      if (line) {
        line->input = reading_;
        lines.push_back(std::move(*line));
        continue;
      }
      // Truncated or replaced under us (copytruncate, a new file moved in): what was
      // read of it is final, and its path is read again from the start, as a new input.
      if (!input.pipe && reading_ + 1 == inputs_.size() && changed_under_us(input))
        add_file_again(input);
      // This input has nothing more now. A later input means this one is complete.
      if (reading_ + 1 < inputs_.size() || input.closed) {
        if (auto last = input.take_partial()) {
          last->input = reading_;
          lines.push_back(std::move(*last));
          continue;
        }
        if (reading_ + 1 < inputs_.size()) {
          finish(input);
          ++reading_;
          continue;
        }
        break;
      }
      if (auto last = input.partial_if_settled(options_.partial_line_wait)) {
        last->input = reading_;
        lines.push_back(std::move(*last));
        continue;
      }
      if (options_.follow && is_glob(options_.path)) look_for_new_files();
      if (reading_ + 1 < inputs_.size()) continue;
      break;
    }
    if (lines.empty()) return;
    const auto now = std::chrono::system_clock::now();
    std::lock_guard lock(mutex_);
    for (auto& line : lines) {
      auto& tracker = trackers_[line.input];
      // Blank lines carry nothing: done as soon as read.
      if (!line.overlong && line.body.find_first_not_of(" \t\r") == std::string::npos) {
        tracker.skipped(line.number, line.end);
        dirty_ = true;
        continue;
      }
      tracker.delivered(line.number, line.end);
      delivery_.clear();
      delivery_.id(names_[line.input] + ":" + std::to_string(line.number))
          .receipt(receipt_of(line.input, line.number))
          .body(std::move(line.body))
          .received_at(now);
      if (line.overlong)
        delivery_.problem(false, "line_too_long",
                          "line " + std::to_string(line.number) + " is longer than " +
                              std::to_string(options_.max_line_bytes) +
                              " bytes (source.file.max_line_bytes); its first " +
                              std::to_string(kOverlongKept) + " bytes are kept");
      out.push_back(delivery_.build());
    }
  }

  // At the end of a regular file: shorter than what was read (truncated), or its path
  // now names another file (replaced, rotated).
  bool changed_under_us(const Input& input) const {
    struct stat now {};
    if (::fstat(input.fd, &now) == 0 &&
        static_cast<std::uint64_t>(now.st_size) < input.taken + input.pending().size())
      return true;
    struct stat named {};
    return ::stat(input.path.c_str(), &named) == 0 &&
           static_cast<std::uint64_t>(named.st_ino) != input.inode;
  }

  void add_file_again(const Input& input) {
    warn("file " + input.path + " was truncated or replaced after line " +
         std::to_string(input.line) +
         ": read again from its start (the sink dedupes what it "
         "already holds; lines of the old one not yet acked are not read again)");
    auto again = std::make_unique<Input>();
    again->path = input.path;
    add_input(std::move(again), {}, reading_);
    std::lock_guard lock(mutex_);
    dirty_ = true;  // the checkpoint says so even if none of it is read yet
  }

  void look_for_new_files() {
    for (const auto& path : matching_files(options_.path))
      if (std::find(names_.begin(), names_.end(), path) == names_.end() && path > names_.back()) {
        add_file(path);
      }
  }

  Input* waiting_pipe() {
    if (reading_ < inputs_.size() && inputs_[reading_]->pipe && !inputs_[reading_]->closed)
      return inputs_[reading_].get();
    return nullptr;
  }

  std::chrono::milliseconds until_next_look() {
    auto wait = options_.poll_interval;
    std::lock_guard lock(mutex_);
    if (!retries_.empty()) {
      const auto due = std::chrono::duration_cast<std::chrono::milliseconds>(retries_.front().due -
                                                                             Clock::now());
      wait = std::clamp(due, std::chrono::milliseconds(1), wait);
    }
    return wait;
  }

  void take_due_retries(std::vector<Delivery>& out, int max) {
    std::lock_guard lock(mutex_);
    const auto now = Clock::now();
    // retries_ is kept in due order.
    while (!retries_.empty() && static_cast<int>(out.size()) < max && retries_.front().due <= now) {
      out.push_back(std::move(retries_.front().state));
      retries_.pop_front();
    }
  }

  void done(const Delivery& state) {
    const auto [input, line] = parse_receipt(spi::receipt_of(state));
    std::lock_guard lock(mutex_);
    if (input < trackers_.size() && trackers_[input].settled(line)) dirty_ = true;
  }

  // The same line again, as a new delivery (the settled one is the core's).
  void again(const Delivery& state, Clock::time_point due) {
    spi::DeliveryBuilder builder;  // any thread's: not the reader's
    auto next = builder.id(spi::id_of(state))
                    .receipt(spi::receipt_of(state))
                    .body(spi::body_of(state))
                    .receive_count(spi::receive_count_of(state) + 1)
                    .build();
    std::lock_guard lock(mutex_);
    auto at =
        std::find_if(retries_.begin(), retries_.end(), [&](const Retry& r) { return r.due > due; });
    retries_.insert(at, Retry{due, std::move(next)});
  }

  // The key of the files' position saved with the rows (runtime::with_rows_key).
  std::string rows_key() const {
    return runtime::with_rows_key("file checkpoint=" + checkpoint_ + " pipeline=" + context_.name);
  }

  // For the writers (spi::BatchPositions): every input's position once `batch` is done
  // too, as a checkpoint's text (a path read again counts by its later input, as in the
  // checkpoint file).
  std::optional<PositionUpdate> done_with(std::span<const Delivery> batch) override {
    std::vector<std::pair<std::size_t, std::uint64_t>> lines;  // (input, line), sorted
    lines.reserve(batch.size());
    for (const auto& delivery : batch) lines.push_back(parse_receipt(spi::receipt_of(delivery)));
    std::sort(lines.begin(), lines.end());
    std::vector<std::pair<std::string, Position>> inputs;
    {
      std::lock_guard lock(mutex_);
      inputs.reserve(trackers_.size());
      for (std::size_t i = 0; i < trackers_.size(); ++i) {
        const auto done =
            trackers_[i]
                .done_with([&](std::uint64_t line) {
                  return std::binary_search(lines.begin(), lines.end(), std::pair{i, line});
                })
                .value_or(std::pair{trackers_[i].done_sequence(), trackers_[i].done_position()});
        inputs.emplace_back(names_[i], Position{done.first, done.second, inodes_[i]});
      }
    }
    if (inputs.empty()) return std::nullopt;
    std::map<std::string, Position> files;
    for (auto& [name, at] : inputs) files[name] = at;
    return PositionUpdate{rows_key(), format_checkpoint(files)};
  }

  // Written with its rows: its lines are done (their acks may come later).
  void written(std::span<const Delivery> batch) override {
    for (const auto& delivery : batch) done(delivery);
  }

  // At open: the files' position saved with the rows, when it was saved after the
  // checkpoint file (each is never ahead of the rows written; the later one knows of a
  // file truncated and read again since, and the file lags when a crash came between
  // two of its writes).
  void resume_from_rows(std::uint64_t file_saved_at) {
    std::optional<std::string> stored;
    try {
      stored = context_.positions->load(rows_key());
    } catch (const std::exception& e) {
      throw SourceError(
          SourceErrorKind::transient, "position",
          "reading the files' position saved with the rows (" + rows_key() + "): " + e.what());
    }
    if (!stored) return;
    std::uint64_t rows_saved_at = 0;
    std::map<std::string, Position> with_rows;
    try {
      with_rows = parse_checkpoint(*stored, rows_key(), &rows_saved_at);
    } catch (const std::exception& e) {
      throw SourceError(SourceErrorKind::permanent, "position",
                        std::string(e.what()) + " (a row of sluice_positions)");
    }
    if (rows_saved_at > file_saved_at) positions_ = std::move(with_rows);
  }

  void checkpoint_loop() {
    if (checkpoint_.empty()) return;
    checkpoint_timer_.expires_after(options_.checkpoint_interval);
    checkpoint_timer_.async_wait([this](boost::system::error_code ec) {
      if (ec) return;
      save_checkpoint();
      report();
      checkpoint_loop();
    });
  }

  void save_checkpoint() {
    if (checkpoint_.empty()) return;
    std::map<std::string, Position> files = positions_;
    {
      std::lock_guard lock(mutex_);
      if (!dirty_) return;
      dirty_ = false;
      // A path read again (truncated, replaced) has a later input: the later one counts.
      for (std::size_t i = 0; i < trackers_.size(); ++i)
        files[names_[i]] = {trackers_[i].done_sequence(), trackers_[i].done_position(), inodes_[i]};
    }
    try {
      write_checkpoint(checkpoint_, files);
      positions_ = std::move(files);
    } catch (const std::exception& e) {
      std::lock_guard lock(mutex_);
      dirty_ = true;  // tried again at the next interval; the lines are read again if not
      warn(e.what());
    }
  }

  // The probe's figures: lines left (from the bytes left and the mean line so far) and
  // lines out.
  void report() {
    std::uint64_t bytes_left = 0;
    bool unknown = false;
    for (std::size_t i = reading_; i < inputs_.size(); ++i) {
      const auto& input = *inputs_[i];
      bytes_left += input.pending().size();
      if (input.pipe) {
        unknown = unknown || !input.closed;
        continue;
      }
      // Files not reached yet count by the size they had when found: no system call
      // per file on every receive (a glob may hold thousands).
      if (!input.opened) {
        if (input.size_found > input.start.offset)
          bytes_left += input.size_found - input.start.offset;
        continue;
      }
      struct stat st {};
      if (::fstat(input.fd, &st) == 0) {
        const auto read_to = input.taken + input.pending().size();
        if (static_cast<std::uint64_t>(st.st_size) > read_to)
          bytes_left += static_cast<std::uint64_t>(st.st_size) - read_to;
      }
    }
    long ready = 0;
    if (bytes_left > 0) {
      std::uint64_t lines = 0, bytes = 0;
      for (std::size_t i = 0; i <= std::min(reading_, inputs_.size() - 1); ++i) {
        lines += inputs_[i]->line;
        bytes += inputs_[i]->taken;
      }
      const std::uint64_t mean = lines > 0 ? std::max<std::uint64_t>(1, bytes / lines) : 100;
      ready = static_cast<long>(std::max<std::uint64_t>(1, bytes_left / mean));
    } else if (unknown) {
      ready = -1;
    }
    long in_flight = 0;
    {
      std::lock_guard lock(mutex_);
      for (const auto& tracker : trackers_) in_flight += static_cast<long>(tracker.open());
    }
    progress_->ready = ready;
    progress_->in_flight = in_flight;
  }

  void warn(const std::string& what) {
    if (context_.warning) context_.warning(what);
  }

  const FileSourceOptions options_;
  const spi::SourceContext context_;
  const std::shared_ptr<Progress> progress_;
  const std::string checkpoint_;  // empty: none
  // The I/O thread's:
  std::vector<std::unique_ptr<Input>> inputs_;
  std::size_t reading_ = 0;  // the input being read
  spi::DeliveryBuilder delivery_;
  std::map<std::string, Position> positions_;  // the latest checkpoint written
  asio::steady_timer checkpoint_timer_;
  int stdin_flags_ = -1;
  // Any thread's, under mutex_:
  std::mutex mutex_;
  std::vector<runtime::PrefixTracker> trackers_;  // one per input, by index
  std::vector<std::string> names_;                // each input's path, by index
  std::vector<std::uint64_t> inodes_;             // each input's inode (0: unknown), by index
  struct Retry {
    Clock::time_point due;
    Delivery state;
  };
  std::deque<Retry> retries_;  // in due order
  bool dirty_ = false;         // the trackers moved since the latest checkpoint
  std::shared_ptr<runtime::SourceBatchPositions> batch_positions_;  // with a PositionStore
};

}  // namespace

SourceFactory make_file_source(FileSourceOptions options, std::shared_ptr<Progress> progress) {
  validate(options);
  return [options = std::move(options),
          progress = std::move(progress)](const spi::SourceContext& context) {
    return std::unique_ptr<spi::Source>(std::make_unique<FileSource>(options, context, progress));
  };
}

}  // namespace file

SourceFactory make_file_source(FileSourceOptions options) {
  return file::make_file_source(std::move(options), nullptr);
}

}  // namespace sluice
