#pragma once
// What other threads ask of the connection thread (the container settling a message,
// stopping, rescaling), queued under a mutex and signalled through an eventfd; the
// connection thread runs them in order (amqp_source.cpp run_commands).
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <variant>

#include "runtime/async_wait.hpp"

namespace sluice::amqp {

// Which delivery a settlement is about: its consumer's lease and its delivery tag.
struct DeliveryRef {
  std::uint64_t lease = 0;
  std::uint64_t tag = 0;
  std::string id;  // the message id (the attempt log's key)
};

struct AckCommand {
  DeliveryRef delivery;
};
struct RetryCommand {  // held for the backoff (at most retry_hold_max), then rejected with requeue
  DeliveryRef delivery;
  std::chrono::milliseconds delay{0};
  int receive_count = 0;
};
struct ReleaseCommand {  // nacked with requeue at once
  DeliveryRef delivery;
};
struct RejectCommand {  // basic.reject without requeue: the dead-letter exchange
  DeliveryRef delivery;
};
struct ExpediteCommand {};  // send the acks now: the container is short of permits
struct FlushCommand {       // stop intake, requeue what is held, send every ack
  std::shared_ptr<runtime::Completion> done;
};
struct ReconfigureCommand {  // consumers MIN-MAX
  int min = 0, max = 0;
};

using Command = std::variant<AckCommand, RetryCommand, ReleaseCommand, RejectCommand,
                             ExpediteCommand, FlushCommand, ReconfigureCommand>;

}  // namespace sluice::amqp
