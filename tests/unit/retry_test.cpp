#include "sluice/aws/retry.hpp"

#include <gtest/gtest.h>

using namespace sluice::aws;
using namespace std::chrono_literals;

TEST(RetryStrategy, BackoffIsFullJitterUnderTheExponentialCeiling) {
  RetryStrategy retry({}, 42);
  for (int attempt = 1; attempt <= 12; ++attempt) {
    const auto ceiling = std::min<std::chrono::milliseconds>(20000ms, 100ms * (1 << (attempt - 1)));
    std::chrono::milliseconds largest{0};
    for (int i = 0; i < 200; ++i) {
      const auto d = retry.backoff(attempt, false);
      EXPECT_GE(d.count(), 0);
      EXPECT_LE(d, ceiling);
      largest = std::max(largest, d);
    }
    EXPECT_GT(largest, ceiling / 2) << "jitter should spread over the whole range";
  }
  EXPECT_LE(retry.backoff(30, true), 20000ms);  // capped at 20 s
}

TEST(RetryStrategy, RetriesOnlyRetriableErrorsWithinMaxAttempts) {
  RetryStrategy retry({}, 1);
  const AwsError server(ErrorKind::server, "boom", "InternalError", 500);
  const AwsError client(ErrorKind::client, "no", "QueueDoesNotExist", 400);
  EXPECT_TRUE(retry.on_failure(server, 1));
  EXPECT_TRUE(retry.on_failure(server, 2));
  EXPECT_FALSE(retry.on_failure(server, 3)) << "default max_attempts is 3";
  EXPECT_FALSE(retry.on_failure(client, 1));
  EXPECT_FALSE(retry.on_failure(AwsError(ErrorKind::credentials, "x"), 1));
  EXPECT_TRUE(retry.on_failure(AwsError(ErrorKind::transport, "reset"), 1));
  EXPECT_TRUE(retry.on_failure(AwsError(ErrorKind::timeout, "slow"), 1));
}

TEST(RetryStrategy, QuotaStopsRetryStormsAndRefillsOnSuccess) {
  RetryOptions options;
  options.max_attempts = 100;
  RetryStrategy retry(options, 7);
  const AwsError reset(ErrorKind::transport, "reset");
  int granted = 0;
  while (retry.on_failure(reset, 1)) ++granted;
  EXPECT_EQ(granted, 500 / 5);
  EXPECT_EQ(retry.available_quota(), 0);
  EXPECT_FALSE(retry.on_failure(AwsError(ErrorKind::timeout, "t"), 1));
  retry.on_success(true);  // a successful retry returns its cost
  EXPECT_EQ(retry.available_quota(), 5);
  EXPECT_TRUE(retry.on_failure(reset, 1));
}

TEST(RetryStrategy, TimeoutsCostMoreAndThrottlingDoesNotDrainTheQuota) {
  RetryStrategy retry({}, 3);
  ASSERT_TRUE(retry.on_failure(AwsError(ErrorKind::timeout, "t"), 1));
  EXPECT_EQ(retry.available_quota(), 490);
  ASSERT_TRUE(
      retry.on_failure(AwsError(ErrorKind::throttling, "slow down", "ThrottlingException"), 1));
  EXPECT_EQ(retry.available_quota(), 490);
}

TEST(RetryStrategy, ThrottlingCodesAreRecognised) {
  EXPECT_TRUE(is_throttling_code("ThrottlingException"));
  EXPECT_TRUE(is_throttling_code("RequestThrottled"));
  EXPECT_FALSE(is_throttling_code("QueueDoesNotExist"));
  EXPECT_TRUE(is_clock_skew_code("RequestTimeTooSkewed"));
}

TEST(ClockSkew, LearnsTheServersClockFromItsDateHeader) {
  ClockSkew skew;
  const auto local =
      std::chrono::system_clock::from_time_t(1'700'000'000);  // Tue, 14 Nov 2023 22:13:20 GMT
  EXPECT_FALSE(skew.observe("Tue, 14 Nov 2023 22:14:20 GMT", local)) << "60 s is tolerated";
  EXPECT_TRUE(skew.observe("Tue, 14 Nov 2023 23:13:20 GMT", local));
  EXPECT_EQ(skew.offset(), std::chrono::seconds(3600));
  EXPECT_FALSE(skew.observe("garbage", local));
  const auto corrected = skew.now() - std::chrono::system_clock::now();
  EXPECT_NEAR(std::chrono::duration<double>(corrected).count(), 3600, 5);
}
