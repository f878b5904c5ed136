#pragma once
// The AWS SDKs' "standard" retry mode: bounded attempts, exponential backoff with
// full jitter, and a retry quota (token bucket) so that an outage does not turn
// into a retry storm. Also the clock-skew correction applied to signing.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string_view>

#include "sluice/aws/error.hpp"

namespace sluice::aws {

struct RetryOptions {
  int max_attempts = 3;  // total attempts, the first included
  std::chrono::milliseconds base_delay{100};
  std::chrono::milliseconds throttling_base_delay{1000};
  std::chrono::milliseconds max_backoff{20000};
  int quota_capacity = 500;
  int retry_cost = 5;
  int timeout_retry_cost = 10;
  int success_refund = 1;  // returned to the quota by a success
};

class RetryStrategy {
 public:
  explicit RetryStrategy(RetryOptions options = {}, std::uint64_t seed = std::random_device{}());

  // After attempt number `attempt` (1-based) failed with `error`: the delay before
  // the next attempt, or nullopt when the error is not retriable, the attempts are
  // spent, or the quota is exhausted. Takes the retry's cost from the quota.
  std::optional<std::chrono::milliseconds> on_failure(const AwsError& error, int attempt);
  // A successful attempt refunds the quota.
  void on_success(bool was_retry);

  // Full jitter: uniform in [0, min(cap, base * 2^(attempt-1))].
  std::chrono::milliseconds backoff(int attempt, bool throttling);
  int available_quota() const;
  const RetryOptions& options() const { return options_; }

 private:
  RetryOptions options_;
  mutable std::mutex mutex_;
  std::mt19937_64 random_;
  int quota_;
};

// Error codes by which AWS services report throttling.
bool is_throttling_code(std::string_view code);

// The offset between the service's clock and ours, learnt from a skew error's Date
// header and applied to every signature after it.
class ClockSkew {
 public:
  std::chrono::system_clock::time_point now() const;
  std::chrono::seconds offset() const { return std::chrono::seconds(offset_.load()); }
  // Returns true when the skew changed (the request deserves a retry).
  bool observe(std::string_view http_date, std::chrono::system_clock::time_point local_now);

 private:
  std::atomic<std::int64_t> offset_{0};
};

// The process's one tracker: every client learns from and signs with it (our clock is
// the same for every service).
std::shared_ptr<ClockSkew> process_clock_skew();

// Error codes by which AWS services report a skewed clock.
bool is_clock_skew_code(std::string_view code);

}  // namespace sluice::aws
