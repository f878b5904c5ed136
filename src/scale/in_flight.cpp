#include "sluice/scale/in_flight.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace sluice::scale {

Signal compute_signal(const std::vector<double>& period_averages, long running,
                      const SignalOptions& options, const GateInputs& gates) {
  Signal s;
  s.period_averages = period_averages;
  s.running = running;
  s.spare = options.spare;
  s.capacity = options.capacity;
  for (double average : period_averages)
    s.in_flight_max_average = std::max(s.in_flight_max_average, average);
  // Saturated, never wrapped: a tiny capacity cannot overflow the task count.
  s.tasks_needed = std::min(s.in_flight_max_average / options.capacity + options.spare, kMaxTasks);
  // A tolerance for averages such as 6.999999999 that are 7 in decimal.
  s.desired_tasks = static_cast<long>(std::ceil(s.tasks_needed - 1e-9));
  std::ostringstream why;
  if (options.min_backlog > 0 && gates.backlog < options.min_backlog)
    why << "backlog "
        << (gates.backlog < 0 ? std::string("unknown")
                              : std::to_string(static_cast<long long>(gates.backlog)))
        << " below " << options.min_backlog;
  if (options.min_oldest_age_s > 0 && gates.oldest_age_s < options.min_oldest_age_s) {
    if (why.tellp() > 0) why << "; ";
    why << "oldest message age "
        << (gates.oldest_age_s < 0
                ? std::string("unknown")
                : std::to_string(static_cast<long long>(gates.oldest_age_s)) + "s")
        << " below " << options.min_oldest_age_s << "s";
  }
  if (why.tellp() > 0 && s.desired_tasks > running) {
    s.gated = true;
    s.gate = why.str();
    s.desired_tasks = running;
    s.tasks_needed = static_cast<double>(running);
  }
  s.utilization_percent = 100.0 * s.tasks_needed / static_cast<double>(std::max(running, 1L));
  return s;
}

void InFlightWindow::add(Clock::time_point at, double in_flight) {
  if (!started_) {
    start_ = at;
    started_ = true;
  }
  const long index = static_cast<long>((at - start_) / options_.period);
  if (periods_.empty() || periods_.back().index != index) periods_.push_back({index, 0, 0});
  periods_.back().sum += in_flight;
  ++periods_.back().count;
  ++total_samples_;
  while (!periods_.empty() && periods_.front().index <= index - options_.periods)
    periods_.pop_front();
}

std::vector<double> InFlightWindow::period_averages() const {
  std::vector<double> averages;
  for (const auto& p : periods_) averages.push_back(p.sum / static_cast<double>(p.count));
  return averages;
}

bool InFlightWindow::full(Clock::time_point now) const {
  return started_ && now - start_ >= options_.period * options_.periods;
}

}  // namespace sluice::scale
