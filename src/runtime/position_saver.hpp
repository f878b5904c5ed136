#pragma once
// Saves a source's position to its PositionStore on a thread of its own, at most every
// `interval`, latest value wins: a slow or unreachable database never holds up the
// source's thread. A failed save is logged (once per streak) and the next value is
// saved later; what was offered last is saved once more at the end.
#include <spdlog/spdlog.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/mutex.hpp"
#include "common/thread_name.hpp"
#include "sluice/position_store.hpp"

namespace sluice::runtime {

class PositionSaver {
 public:
  PositionSaver(std::shared_ptr<PositionStore> store, std::string key,
                std::chrono::milliseconds interval)
      : store_(std::move(store)), key_(std::move(key)), interval_(interval) {
    thread_ = std::thread([this] {
      common::name_this_thread("sluice-position");
      run();
    });
  }
  ~PositionSaver() {
    {
      MutexLock lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }

  // Non-blocking.
  void offer(std::string value) {
    MutexLock lock(mutex_);
    offered_ = std::move(value);
  }
  // Saves what was offered now; waits at most `timeout`. False when it is not saved.
  bool save_now(std::chrono::milliseconds timeout) {
    UniqueMutexLock lock(mutex_);
    urgent_ = true;
    wake_.notify_all();
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (saved_ != offered_)
      if (saved_cv_.wait_until(lock.native(), deadline) == std::cv_status::timeout)
        return saved_ == offered_;
    return true;
  }

 private:
  void run() {
    UniqueMutexLock lock(mutex_);
    for (;;) {
      const auto until = std::chrono::steady_clock::now() + interval_;
      while (!stopping_ && !urgent_)
        if (wake_.wait_until(lock.native(), until) == std::cv_status::timeout) break;
      urgent_ = false;
      if (offered_ != saved_) {
        const std::string value = offered_;
        lock.unlock();
        const bool ok = save(value);
        lock.lock();
        if (ok) saved_ = value;
        saved_cv_.notify_all();
      }
      if (stopping_) return;
    }
  }
  bool save(const std::string& value) {
    try {
      store_->save(key_, value);
      if (failing_) spdlog::info("event=position_saved key=\"{}\" position={}", key_, value);
      failing_ = false;
      return true;
    } catch (const std::exception& e) {
      if (!failing_)
        spdlog::warn(
            "event=position_save_failed key=\"{}\" position={} error=\"{}\" "
            "action=\"tried again later; a restart before then reads again what came "
            "after the last position saved\"",
            key_, value, e.what());
      failing_ = true;
      return false;
    }
  }

  std::shared_ptr<PositionStore> store_;
  const std::string key_;
  const std::chrono::milliseconds interval_;
  Mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable saved_cv_;
  std::string offered_ SLUICE_GUARDED_BY(mutex_);
  std::string saved_ SLUICE_GUARDED_BY(mutex_);
  bool urgent_ SLUICE_GUARDED_BY(mutex_) = false;
  bool stopping_ SLUICE_GUARDED_BY(mutex_) = false;
  bool failing_ = false;  // the saver thread's
  std::thread thread_;
};

}  // namespace sluice::runtime
