#pragma once
// The settled prefix of a sequence read in order and settled in any order (a file's
// lines, a RabbitMQ stream's deliveries): a checkpoint may only cover the longest run
// of settled items from the start (a slow item must not be skipped by its neighbours'
// settlements, or a crash would lose it). Each item has a sequence number (increasing
// as read) and a position (what a resume needs: the byte after a line, a stream
// offset). Pure logic; the caller holds the lock.

#include <cstdint>
#include <iterator>
#include <map>
#include <optional>
#include <utility>

#include "runtime/fault_switch.hpp"

namespace sluice::runtime {

class PrefixTracker {
 public:
  // Resumes after a checkpoint: items up to `sequence`, ending at `position`, are done.
  void resume(std::uint64_t sequence, std::uint64_t position) {
    done_sequence_ = sequence;
    done_position_ = position;
    open_.clear();
    open_count_ = 0;
  }
  // Item `sequence` (increasing from resume's + 1) was read; `position` is its own.
  void delivered(std::uint64_t sequence, std::uint64_t position) {
    if (sequence <= done_sequence_) return;
    if (open_.emplace(sequence, Entry{position, false}).second) ++open_count_;
  }
  // An item that is done as soon as it is read (a blank line): no message.
  void skipped(std::uint64_t sequence, std::uint64_t position) {
    delivered(sequence, position);
    settled(sequence);
  }
  // Acked or rejected: done. False when the item is not open.
  bool settled(std::uint64_t sequence) {
    auto it = open_.find(sequence);
    if (it == open_.end() || it->second.settled) return false;
    it->second.settled = true;
    --open_count_;
    if (SLUICE_FAULT(position_ahead_of_rows)) {  // everything before it taken as done
      done_sequence_ = it->first;
      done_position_ = it->second.position;
      open_.erase(open_.begin(), std::next(it));
      open_count_ = 0;
      for (const auto& [sequence, entry] : open_) open_count_ += entry.settled ? 0 : 1;
      return true;
    }
    while (!open_.empty() && open_.begin()->second.settled) {
      done_sequence_ = open_.begin()->first;
      done_position_ = open_.begin()->second.position;
      open_.erase(open_.begin());
    }
    return true;
  }
  // Where the done prefix would end were the items `in_batch(sequence)` says settled
  // too (a batch about to be written): the position of its last item, and its
  // sequence; none when it would not reach past sequence 0 (nothing is done).
  template <typename InBatch>
  std::optional<std::pair<std::uint64_t, std::uint64_t>> done_with(InBatch in_batch) const {
    std::uint64_t sequence = done_sequence_, position = done_position_;
    for (const auto& [item, entry] : open_) {
      if (!entry.settled && !in_batch(item)) break;
      sequence = item;
      position = entry.position;
    }
    if (sequence == 0) return std::nullopt;
    return std::pair{sequence, position};
  }
  std::uint64_t done_sequence() const { return done_sequence_; }  // every item up to it is done
  std::uint64_t done_position() const { return done_position_; }  // the last done item's
  // Read items not yet settled.
  std::size_t open() const { return open_count_; }

 private:
  struct Entry {
    std::uint64_t position;
    bool settled;
  };
  std::uint64_t done_sequence_ = 0;
  std::uint64_t done_position_ = 0;
  std::map<std::uint64_t, Entry> open_;
  std::size_t open_count_ = 0;
};

}  // namespace sluice::runtime
