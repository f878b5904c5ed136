#pragma once
// The acked prefix of one file: lines are delivered in order and settled in any
// order; the checkpoint may only cover the longest run of settled lines from the
// start (a slow line must not be skipped by its neighbours' acks, or a crash would
// lose it). Pure logic; the caller holds the lock.

#include <cstdint>
#include <map>

namespace sluice::file {

class LineTracker {
 public:
  // Resumes after a checkpoint: `line` lines ending at byte `offset` are done.
  void resume(std::uint64_t line, std::uint64_t offset) {
    done_line_ = line;
    done_offset_ = offset;
    open_.clear();
    open_count_ = 0;
  }
  // Line `line` (numbered from 1, increasing) ends at byte `end` (after its newline).
  void delivered(std::uint64_t line, std::uint64_t end) {
    if (line <= done_line_) return;
    if (open_.emplace(line, Entry{end, false}).second) ++open_count_;
  }
  // A line that is done as soon as it is read (blank): no message.
  void skipped(std::uint64_t line, std::uint64_t end) {
    delivered(line, end);
    settled(line);
  }
  // Acked or rejected: done. False when the line is not open.
  bool settled(std::uint64_t line) {
    auto it = open_.find(line);
    if (it == open_.end() || it->second.settled) return false;
    it->second.settled = true;
    --open_count_;
    while (!open_.empty() && open_.begin()->second.settled) {
      done_line_ = open_.begin()->first;
      done_offset_ = open_.begin()->second.end;
      open_.erase(open_.begin());
    }
    return true;
  }
  std::uint64_t done_line() const { return done_line_; }      // every line up to it is done
  std::uint64_t done_offset() const { return done_offset_; }  // the byte after it
  // Delivered lines not yet settled.
  std::size_t open() const { return open_count_; }

 private:
  struct Entry {
    std::uint64_t end;
    bool settled;
  };
  std::uint64_t done_line_ = 0;
  std::uint64_t done_offset_ = 0;
  std::map<std::uint64_t, Entry> open_;
  std::size_t open_count_ = 0;
};

}  // namespace sluice::file
