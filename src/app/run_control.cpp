#include "app/run_control.hpp"

namespace sluice::app {

void RunControl::attach(Container* container) {
  MutexLock lock(mutex_);
  container_ = container;
  if (container_ && paused_by_hand_) container_->pause();
}

void RunControl::set_start_state(std::string state, std::string error) {
  MutexLock lock(mutex_);
  start_state_ = std::move(state);
  start_error_ = std::move(error);
}

void RunControl::pause() {
  MutexLock lock(mutex_);
  paused_by_hand_ = true;
  if (container_) container_->pause();
  metrics_.set_paused("manual", true);
}

void RunControl::resume() {
  MutexLock lock(mutex_);
  paused_by_hand_ = false;
  if (container_) container_->resume();
  metrics_.set_paused("manual", false);
}

std::string RunControl::state() const {
  MutexLock lock(mutex_);
  return state_locked();
}

nlohmann::json RunControl::status() const {
  MutexLock lock(mutex_);
  nlohmann::json s{{"pipeline", name_}, {"state", state_locked()}};
  if (!start_error_.empty()) s["error"] = start_error_;
  if (container_) {
    const auto stats = container_->stats();
    s["in_flight"] = stats.in_flight;
    s["receivers"] = stats.concurrent_receives;
  }
  s["received"] = metrics_.received();
  s["written"] = metrics_.written();
  s["duplicates"] = metrics_.duplicates();
  s["filtered"] = metrics_.filtered();
  return s;
}

std::string RunControl::state_locked() const {
  if (!start_state_.empty()) return start_state_;
  // Pausing: a receive opened before the pause has not returned yet.
  if (container_ && container_->paused())
    return container_->stats().concurrent_receives > 0 ? "pausing" : "paused";
  if (!writer_.healthy()) return "sink_unavailable";
  return "running";
}

}  // namespace sluice::app
