// source.max_messages_per_second: the bucket never lets more than rate * T + burst
// through in any window T, keeps receives full at any rate, and gives back what a
// receive did not use.
#include "runtime/token_bucket.hpp"

#include <gtest/gtest.h>

#include <deque>
#include <random>

using sluice::runtime::TokenBucket;
using Clock = TokenBucket::Clock;
using namespace std::chrono_literals;

TEST(TokenBucket, NoWindowSeesMoreThanRateTimesItsLengthPlusOneBucket) {
  for (const double rate : {0.5, 3.0, 50.0, 1000.0}) {
    const double burst = std::min(rate, 10.0);
    const auto start = Clock::time_point{} + 1h;
    TokenBucket bucket(rate, burst, start);
    std::mt19937 random(7);
    // Receive loops asking for 10 at random moments, for 60 simulated seconds.
    std::vector<std::pair<Clock::time_point, int>> grants;
    auto now = start;
    while (now < start + 60s) {
      now += std::chrono::microseconds(random() % 2000);  // asking faster than any rate
      Clock::duration wait{};
      if (const int n = bucket.take(10, now, wait); n > 0) {
        EXPECT_LE(n, std::max(1, static_cast<int>(burst)));
        // A receive returns fewer at times: the rest comes back.
        const int used = random() % 4 == 0 ? n / 2 : n;
        bucket.returned(n, used);
        grants.emplace_back(now, used);
      } else {
        EXPECT_GT(wait.count(), 0);
      }
    }
    ASSERT_FALSE(grants.empty());
    for (std::size_t i = 0; i < grants.size(); ++i) {
      int total = 0;
      for (std::size_t j = i; j < grants.size(); ++j) {
        total += grants[j].second;
        const double window =
            std::chrono::duration<double>(grants[j].first - grants[i].first).count();
        ASSERT_LE(total, rate * window + bucket.burst() + 1e-9)
            << "rate " << rate << ": " << total << " messages in " << window << " s";
      }
    }
    int total = 0;
    for (const auto& g : grants) total += g.second;
    EXPECT_GE(total, rate * 60 * 0.8) << "rate " << rate << ": the bucket is not starved";
  }
}

TEST(TokenBucket, WaitsForAFullReceiveAndSaysHowLong) {
  const auto t0 = Clock::time_point{} + 1h;
  TokenBucket bucket(100, 10, t0);
  Clock::duration wait{};
  EXPECT_EQ(bucket.take(10, t0, wait), 10);
  bucket.returned(10, 10);  // the receive came back full
  EXPECT_EQ(bucket.take(10, t0 + 50ms, wait), 0) << "5 tokens: not a full receive yet";
  EXPECT_NEAR(std::chrono::duration<double>(wait).count(), 0.05, 1e-6);
  EXPECT_EQ(bucket.take(10, t0 + 100ms, wait), 10);
  bucket.returned(10, 10);
  EXPECT_EQ(bucket.take(3, t0 + 130ms, wait), 3) << "a smaller receive takes what it asks";
  // Slower than one receive a second: the whole bucket (2) at a time.
  TokenBucket slow(2, 2, t0);
  EXPECT_EQ(slow.take(10, t0, wait), 2);
  slow.returned(2, 2);
  EXPECT_EQ(slow.take(10, t0 + 500ms, wait), 0);
  EXPECT_EQ(slow.take(10, t0 + 1s, wait), 2);
}

// Receives still open hold their tokens: four idle long polls cannot save up four
// receives' worth for when messages arrive (the bucket holds one between them).
TEST(TokenBucket, OpenReceivesHoldTheirTokensAgainstTheBucket) {
  const auto t0 = Clock::time_point{} + 1h;
  TokenBucket bucket(10, 10, t0);
  Clock::duration wait{};
  ASSERT_EQ(bucket.take(10, t0, wait), 10);  // a long poll opens
  EXPECT_EQ(bucket.take(10, t0 + 6s, wait), 0) << "6 s later: still held by the first poll";
  bucket.returned(10, 10);  // it returns with 10
  EXPECT_EQ(bucket.take(10, t0 + 6s, wait), 0) << "and the bucket starts from empty";
  EXPECT_EQ(bucket.take(10, t0 + 7s, wait), 10);
  bucket.returned(10, 0);  // an empty receive gives back all
  EXPECT_EQ(bucket.take(10, t0 + 7s, wait), 10);
  // A rate too small for the clock is taken as the least one (0.001 a second: a
  // token every 1,000 s), never a wait that overflows into a nanosecond's spin.
  TokenBucket tiny(1e-12, 1, t0);
  ASSERT_EQ(tiny.take(1, t0, wait), 1);
  tiny.returned(1, 1);
  EXPECT_EQ(tiny.take(1, t0, wait), 0);
  EXPECT_EQ(wait, std::chrono::duration_cast<Clock::duration>(1000s));
}
