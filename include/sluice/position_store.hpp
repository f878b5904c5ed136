#pragma once
// Where a source that reads a log rather than a queue keeps how far it has handled
// it, so that a restart resumes there: a RabbitMQ stream read over AMQP 0-9-1, for
// which the broker stores no offset. `sluice run` keeps positions in its sink's
// database (table or collection sluice_positions), written apart from the records
// (see docs/rabbitmq.md); a program linking the library gives the container its own
// (Container::set_position_store) or none (a restart starts where its options say).

#include <optional>
#include <string>

namespace sluice {

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
