// The container's options: their checks and Spring's concurrency syntax.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "sluice/container.hpp"
#include "sluice/option_error.hpp"

namespace sluice {

namespace {
[[noreturn]] void bad_option(const std::string& name, const std::string& value,
                             const std::string& expected) {
  throw OptionError("container", name, value, expected);
}
template <class Rep, class Period>
std::string str(std::chrono::duration<Rep, Period> d) {
  return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(d).count()) + " ms";
}
}  // namespace

void validate(const ContainerOptions& o) {
  if (o.max_in_flight < 1)
    bad_option("max_in_flight", std::to_string(o.max_in_flight), "at least 1");
  if (o.min_concurrent_receives < 1)
    bad_option("min_concurrent_receives", std::to_string(o.min_concurrent_receives), "at least 1");
  if (o.max_concurrent_receives < o.min_concurrent_receives)
    bad_option(
        "max_concurrent_receives", std::to_string(o.max_concurrent_receives),
        "at least min_concurrent_receives (" + std::to_string(o.min_concurrent_receives) + ")");
  if (o.worker_threads < 0)
    bad_option("worker_threads", std::to_string(o.worker_threads),
               "0 (handlers on the I/O thread) or more");
  if (o.handoff_capacity < 0)
    bad_option("handoff_capacity", std::to_string(o.handoff_capacity),
               "0 (= max_in_flight) or more");
  if (o.heartbeat_interval < std::chrono::milliseconds(0))
    bad_option("heartbeat_interval", str(o.heartbeat_interval),
               "0 (a third of the source's lease) or more");
  if (o.failure_backoff_base < std::chrono::milliseconds(0))
    bad_option("failure_backoff_base", str(o.failure_backoff_base), "0 or more");
  if (o.failure_backoff_max < o.failure_backoff_base)
    bad_option("failure_backoff_max", str(o.failure_backoff_max),
               "at least failure_backoff_base (" + str(o.failure_backoff_base) + ")");
  if (o.shutdown_deadline < std::chrono::milliseconds(0))
    bad_option("shutdown_deadline", str(o.shutdown_deadline), "0 or more");
  if (!(o.max_messages_per_second >= 0) || o.max_messages_per_second > 1e6 ||
      (o.max_messages_per_second > 0 && o.max_messages_per_second < 0.001))
    bad_option("max_messages_per_second", std::to_string(o.max_messages_per_second),
               "0 (no limit), or from 0.001 to 1000000");
  if (o.consecutive_full_trigger < 1)
    bad_option("consecutive_full_trigger", std::to_string(o.consecutive_full_trigger),
               "at least 1");
  if (o.consecutive_empty_trigger < 1)
    bad_option("consecutive_empty_trigger", std::to_string(o.consecutive_empty_trigger),
               "at least 1");
  if (o.ordered_group_runs && o.listener_mode != ListenerMode::batch)
    bad_option("ordered_group_runs", "true",
               "false with a single listener (runs go to a batch listener, in one call)");
  if (o.error_backoff_max <= std::chrono::milliseconds(0))
    bad_option("error_backoff_max", str(o.error_backoff_max), "more than 0");
}

int max_auto_receives(int max_in_flight, int max_batch) {
  return std::clamp(max_in_flight / std::max(1, max_batch), 1, kMaxAutoReceives);
}

void parse_concurrency(const std::string& text, ContainerOptions& options) {
  if (text == "auto") {
    options.auto_concurrency = true;
    options.min_concurrent_receives = 1;
    options.max_concurrent_receives = kMaxAutoReceives;
    return;
  }
  options.auto_concurrency = false;
  auto number = [&](const std::string& part) {
    std::size_t used = 0;
    int value = 0;
    try {
      value = std::stoi(part, &used);
    } catch (...) {
      used = 0;
    }
    if (used != part.size() || part.empty() || value < 1)
      bad_option("concurrency", "\"" + text + "\"",
                 "N or MIN-MAX with positive integers (e.g. \"2-4\")");
    return value;
  };
  const auto dash = text.find('-');
  if (dash == std::string::npos) {
    options.min_concurrent_receives = options.max_concurrent_receives = number(text);
  } else {
    options.min_concurrent_receives = number(text.substr(0, dash));
    options.max_concurrent_receives = number(text.substr(dash + 1));
    if (options.max_concurrent_receives < options.min_concurrent_receives)
      bad_option("concurrency", "\"" + text + "\"", "MIN-MAX with MIN <= MAX");
  }
}

}  // namespace sluice
