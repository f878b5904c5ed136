#include "sluice/aws/retry.hpp"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <string>

namespace sluice::aws {

RetryStrategy::RetryStrategy(RetryOptions options, std::uint64_t seed)
    : options_(options), random_(seed), quota_(options.quota_capacity) {}

std::chrono::milliseconds RetryStrategy::backoff(int attempt, bool throttling) {
  const double base = static_cast<double>(
      (throttling ? options_.throttling_base_delay : options_.base_delay).count());
  const double cap = static_cast<double>(options_.max_backoff.count());
  const double ceiling = std::min(cap, base * std::pow(2.0, std::max(0, attempt - 1)));
  std::lock_guard lock(mutex_);
  std::uniform_real_distribution<double> jitter(0.0, 1.0);
  return std::chrono::milliseconds(static_cast<std::int64_t>(jitter(random_) * ceiling));
}

std::optional<std::chrono::milliseconds> RetryStrategy::on_failure(const AwsError& error,
                                                                   int attempt) {
  if (!error.retryable() || attempt >= options_.max_attempts) return std::nullopt;
  const int cost =
      error.kind() == ErrorKind::timeout ? options_.timeout_retry_cost : options_.retry_cost;
  {
    std::lock_guard lock(mutex_);
    // Throttling does not drain the quota: the service is up, it wants us slower.
    if (error.kind() != ErrorKind::throttling) {
      if (quota_ < cost) return std::nullopt;
      quota_ -= cost;
    }
  }
  return backoff(attempt, error.kind() == ErrorKind::throttling);
}

void RetryStrategy::on_success(bool was_retry) {
  std::lock_guard lock(mutex_);
  quota_ = std::min(options_.quota_capacity,
                    quota_ + (was_retry ? options_.retry_cost : options_.success_refund));
}

int RetryStrategy::available_quota() const {
  std::lock_guard lock(mutex_);
  return quota_;
}

bool is_throttling_code(std::string_view code) {
  static constexpr std::string_view codes[] = {"Throttling",
                                               "ThrottlingException",
                                               "ThrottledException",
                                               "RequestThrottledException",
                                               "TooManyRequestsException",
                                               "ProvisionedThroughputExceededException",
                                               "TransactionInProgressException",
                                               "RequestLimitExceeded",
                                               "BandwidthLimitExceeded",
                                               "LimitExceededException",
                                               "RequestThrottled",
                                               "SlowDown",
                                               "PriorRequestNotComplete",
                                               "EC2ThrottledException",
                                               "RequestThrottledException"};
  return std::find(std::begin(codes), std::end(codes), code) != std::end(codes);
}

std::shared_ptr<ClockSkew> process_clock_skew() {
  static const auto skew = std::make_shared<ClockSkew>();
  return skew;
}

bool is_clock_skew_code(std::string_view code) {
  return code == "RequestTimeTooSkewed" || code == "RequestExpired" ||
         code == "InvalidSignatureException" || code == "SignatureDoesNotMatch" ||
         code == "AuthFailure" || code == "RequestInTheFuture";
}

std::chrono::system_clock::time_point ClockSkew::now() const {
  return std::chrono::system_clock::now() + std::chrono::seconds(offset_.load());
}

bool ClockSkew::observe(std::string_view http_date, std::chrono::system_clock::time_point local) {
  // RFC 7231 IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT"
  std::tm tm{};
  const std::string copy(http_date);
  if (!strptime(copy.c_str(), "%a, %d %b %Y %H:%M:%S GMT", &tm)) return false;
  const std::time_t server = timegm(&tm);
  const std::int64_t skew = static_cast<std::int64_t>(server) -
                            static_cast<std::int64_t>(std::chrono::system_clock::to_time_t(local));
  // Under four minutes, SigV4 accepts the request anyway (it allows 5).
  const std::int64_t previous = offset_.load();
  if (std::abs(skew - previous) < 240) return false;
  offset_.store(skew);
  return true;
}

}  // namespace sluice::aws
