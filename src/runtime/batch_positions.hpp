#pragma once
// A log-reading source's spi::BatchPositions, answered by the source until it goes:
// the writers hold its messages, and so this, possibly longer than the source lives.
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>

#include "sluice/spi/source.hpp"

namespace sluice::runtime {

// The key a batch's position is saved under, beside the source's own `key` (which the
// source saves apart, from what is settled). Each alone is never ahead of the rows
// written; a restart takes the further of the two.
inline std::string with_rows_key(const std::string& key) {
  return key + "#rows";
}

// What the source does for spi::BatchPositions.
class PositionsOfBatches {
 public:
  virtual ~PositionsOfBatches() = default;
  virtual std::optional<PositionUpdate> done_with(std::span<const spi::Delivery> batch) = 0;
  virtual void written(std::span<const spi::Delivery> batch) = 0;
};

class SourceBatchPositions final : public spi::BatchPositions {
 public:
  explicit SourceBatchPositions(PositionsOfBatches& source) : source_(&source) {}

  std::optional<PositionUpdate> done_with(std::span<const spi::Delivery> batch) override {
    std::lock_guard lock(mutex_);
    return source_ ? source_->done_with(batch) : std::nullopt;
  }
  void written(std::span<const spi::Delivery> batch) override {
    std::lock_guard lock(mutex_);
    if (source_) source_->written(batch);
  }
  // The source is going: no more calls (waits for one under way).
  void detach() {
    std::lock_guard lock(mutex_);
    source_ = nullptr;
  }

 private:
  std::mutex mutex_;
  PositionsOfBatches* source_;
};

}  // namespace sluice::runtime
