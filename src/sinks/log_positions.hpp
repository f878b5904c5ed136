#pragma once
// The positions a batch of records brings forward in the logs its messages were read
// from (a RabbitMQ stream, files: spi::BatchPositions), for a sink that saves them in
// the batch's own transaction. None for a queue's messages.
#include <span>
#include <utility>
#include <vector>

#include "sinks/writer.hpp"
#include "sluice/spi/source.hpp"

namespace sluice::sinks {

class LogPositions {
 public:
  // `items`: the batch (empty: a sink that does not save positions with its records).
  explicit LogPositions(std::span<const BatchWriter::Item> items);
  bool empty() const { return by_source_.empty(); }
  // Each source's position once the batch is done, to write with it.
  std::vector<PositionUpdate> done_with() const;
  // The batch is committed: its messages count as done for the next batches' positions.
  // Only when every record is in the table, as such a sink promises (else they count
  // once they are settled); an error here never has the batch written again.
  void written(const Sink& sink, const WriteResult& result) const;

 private:
  std::vector<std::pair<spi::BatchPositions*, std::vector<spi::Delivery>>> by_source_;
};

}  // namespace sluice::sinks
