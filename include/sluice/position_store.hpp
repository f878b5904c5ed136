#pragma once
// Where a source that reads a log rather than a queue keeps how far it has handled
// it, so that a restart resumes there: a RabbitMQ stream read over AMQP 0-9-1, for
// which the broker stores no offset, or a file. `sluice run` keeps positions in its
// sink's database (table or collection sluice_positions): a SQL sink writes each batch's
// position in the batch's own transaction (spi::BatchPositions), and the source saves
// its settled position apart as well; a restart takes the further of the two (see
// docs/rabbitmq.md). A program linking the library gives the container its own store
// (Container::set_position_store) or none (a restart starts where its options say).

#include <optional>
#include <string>

namespace sluice {

// A position, under its PositionStore key: what a batch of records brings forward.
struct PositionUpdate {
  std::string key;
  std::string value;
};

class PositionStore {
 public:
  virtual ~PositionStore() = default;
  // The value saved under `key`, or none. May block; throws std::exception when the
  // store cannot be read (the source does not start from a guess: it tries again).
  virtual std::optional<std::string> load(const std::string& key) = 0;
  // Replaces the value under `key`, durably. May block; throws std::exception on
  // failure (the source saves a later value later).
  virtual void save(const std::string& key, const std::string& value) = 0;
};

}  // namespace sluice
