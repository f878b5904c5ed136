#pragma once
// The deterministic simulation of the consumer core: the real container core (intake,
// permits, dispatch, worker stage, settlement, heartbeat, the stop sequence), the real
// writers' queue (sinks::OrderedWriteQueue), driven on one thread by a virtual clock,
// with a simulated queue behind the public source SPI and a simulated database behind
// it. Every choice (what a receive brings, which call fails, how long a write takes,
// when the stop comes) is drawn from one seeded generator, so that a seed replays
// exactly. See tests/sim/README.md.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace sluice::sim {

// The fault kinds a schedule can draw; the sweep reports how often each was drawn.
enum class Fault {
  receive_error,
  receive_timeout,
  empty_receive,
  partial_receive,
  duplicate_delivery,
  ack_failed,
  extend_failed,
  lease_expired,
  redelivery,
  fifo_groups_interleaved,
  handler_throws,
  write_never_returns,
  sink_unavailable,
  slow_write,
  sink_refuses_record,
  sink_commits_then_fails,
  reject_failed,
  open_failed,
  stop_mid_run,
  stop_deadline_hit,
  count_
};
const char* to_string(Fault fault);

struct Outcome {
  bool ok = true;
  std::string failure;  // the invariant broken, the message or group, the virtual time
  std::uint64_t log_hash = 0;
  std::vector<std::string> log;  // every scheduling decision, with its virtual time
  std::map<Fault, std::uint64_t> faults;
  std::string summary;  // the schedule's shape (queue kind, sizes, options)
};

struct Options {
  bool keep_log = false;  // the event log in Outcome::log (its hash is always computed)
};

// One seed, start to end.
Outcome run_seed(std::uint64_t seed, const Options& options = {});

}  // namespace sluice::sim
