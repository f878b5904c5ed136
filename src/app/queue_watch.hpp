#pragma once
// What `sluice run` needs to know of its queue, apart from the container: whether it
// exists at start (a typo is exit 2, not warnings forever) and how many messages it
// holds (the backlog gauge and --until-drained). Each runs on a thread of its own: a
// frozen broker or endpoint never holds the main loop or the signal path.
#include <atomic>
#include <functional>
#include <memory>

#include "app/config.hpp"

namespace sluice::app {

struct QueueCounts {
  std::atomic<long> visible{-1};            // ready to be delivered
  std::atomic<long> not_visible{-1};        // delivered, not yet acknowledged (0 where unknown)
  std::atomic<std::int64_t> read_at_ns{0};  // steady clock; 0: never read
};

class QueueWatch {
 public:
  virtual ~QueueWatch() = default;
  // 0: go on; 2: an error was printed (exit 2); -1: a signal came while checking.
  virtual int check_at_start(bool wait_for_queue, const std::function<bool()>& signalled) = 0;
  // Reads the counts every 500 ms until stop().
  virtual void start(QueueCounts& counts) = 0;
  virtual void stop() = 0;
};

// Throws ConfigError (exit 2) for settings the client refuses (no region, ...).
std::unique_ptr<QueueWatch> make_queue_watch(const PipelineConfig& config);

}  // namespace sluice::app
