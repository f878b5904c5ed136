#pragma once
// A running pipeline's state as the process's other threads see it: what the admin
// endpoints and /readyz read and change (RunControl), and the messages whose latest
// write failed (UnresolvedRecords).
#include <atomic>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_set>

#include "common/mutex.hpp"
#include "observe/admin.hpp"
#include "observe/metrics.hpp"
#include "sinks/writer.hpp"
#include "sluice/container.hpp"

namespace sluice::app {

// Messages whose latest write failed: a drained queue with some left (the queue's own
// redrive policy took them away) is not a success. Any writer thread; the common
// case, nothing unresolved and a record written, takes no lock.
class UnresolvedRecords {
 public:
  void record(sinks::WriteOutcome outcome, std::string_view message_id) {
    const bool failed = outcome == sinks::WriteOutcome::failed;
    if (!failed && !any_.load(std::memory_order_acquire)) return;
    MutexLock lock(mutex_);
    if (failed)
      ids_.emplace(message_id);
    else
      ids_.erase(std::string(message_id));
    any_.store(!ids_.empty(), std::memory_order_release);
  }
  std::size_t count() const {
    MutexLock lock(mutex_);
    return ids_.size();
  }

 private:
  mutable Mutex mutex_;
  std::unordered_set<std::string> ids_ SLUICE_GUARDED_BY(mutex_);
  std::atomic<bool> any_{false};
};

// The admin endpoints' view of one pipeline (the metrics server's thread calls it
// while the main thread may let the container go: attach(nullptr) waits for a call).
class RunControl : public PipelineControl {
 public:
  RunControl(std::string name, PipelineMetrics& metrics, sinks::BatchWriter& writer)
      : name_(std::move(name)), metrics_(metrics), writer_(writer) {}
  // A pause asked for before the container existed (a pipeline still opening its
  // sink) is in force once it does.
  void attach(Container* container);
  // Not yet running: "starting", or "sink_unavailable" with why (the last attempt's
  // error) while a pipeline of several retries its sink; empty once it runs.
  void set_start_state(std::string state, std::string error = {});
  const std::string& name() const override { return name_; }
  void pause() override;
  void resume() override;
  // running, pausing, paused, sink_unavailable or starting.
  std::string state() const;
  nlohmann::json status() const override;

 private:
  std::string state_locked() const SLUICE_REQUIRES(mutex_);
  std::string name_;
  PipelineMetrics& metrics_;
  sinks::BatchWriter& writer_;
  mutable Mutex mutex_;
  Container* container_ SLUICE_GUARDED_BY(mutex_) = nullptr;
  bool paused_by_hand_ SLUICE_GUARDED_BY(mutex_) = false;
  std::string start_state_ SLUICE_GUARDED_BY(mutex_) = "starting";
  std::string start_error_ SLUICE_GUARDED_BY(mutex_);
};

}  // namespace sluice::app
