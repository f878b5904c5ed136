// Seed 004's in-flight signal (pure logic), the histogram quantiles behind
// sluice_latency_quantile_seconds, and the autoscale JSON document.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "app/autoscale.hpp"
#include "app/metrics.hpp"
#include "sluice/scale/in_flight.hpp"

using namespace sluice;
using namespace std::chrono_literals;

TEST(InFlightSignal, CapacityOneIsTheSeedsFormula) {
  scale::SignalOptions options;
  options.spare = 2;
  // Five one-minute averages; the largest is 10: desired 12, 12 of 8 running = 150 %.
  const auto s = scale::compute_signal({4, 10, 7.5, 3, 0}, 8, options);
  EXPECT_DOUBLE_EQ(s.in_flight_max_average, 10);
  EXPECT_EQ(s.desired_tasks, 12);
  EXPECT_DOUBLE_EQ(s.utilization_percent, 150);
  // A fractional average: the seed's utilization (100 x (9.4 + 2) / 10), desired rounded up.
  const auto f = scale::compute_signal({9.4}, 10, options);
  EXPECT_DOUBLE_EQ(f.utilization_percent, 114);
  EXPECT_EQ(f.desired_tasks, 12);
}

TEST(InFlightSignal, CapacityDividesAndRunningZeroCountsAsOne) {
  scale::SignalOptions options;
  options.spare = 1;
  options.capacity = 100;  // a Sluice task with max_in_flight 100
  auto s = scale::compute_signal({250}, 4, options);
  EXPECT_DOUBLE_EQ(s.tasks_needed, 3.5);
  EXPECT_EQ(s.desired_tasks, 4);
  EXPECT_DOUBLE_EQ(s.utilization_percent, 87.5);
  // An exact multiple is not rounded past itself.
  s = scale::compute_signal({300}, 4, options);
  EXPECT_EQ(s.desired_tasks, 4);
  // Nothing running: utilization against one task, so that any need scales out.
  s = scale::compute_signal({0}, 0, options);
  EXPECT_EQ(s.desired_tasks, 1);
  EXPECT_DOUBLE_EQ(s.utilization_percent, 100);
  // No samples yet: only the spare.
  s = scale::compute_signal({}, 3, options);
  EXPECT_EQ(s.desired_tasks, 1);
}

TEST(InFlightSignal, GatesHoldScalingOutOnly) {
  scale::SignalOptions options;
  options.spare = 1;
  options.min_backlog = 50;
  options.min_oldest_age_s = 120;
  // Both gates closed, 20 needed, 5 running: held at 5 (100 %).
  auto s = scale::compute_signal({19}, 5, options, {10, 30});
  EXPECT_TRUE(s.gated);
  EXPECT_EQ(s.desired_tasks, 5);
  EXPECT_DOUBLE_EQ(s.utilization_percent, 100);
  EXPECT_NE(s.gate.find("backlog 10 below 50"), std::string::npos) << s.gate;
  EXPECT_NE(s.gate.find("oldest message age 30s below 120s"), std::string::npos) << s.gate;
  // One gate open is not enough: every gate given must pass.
  s = scale::compute_signal({19}, 5, options, {80, 30});
  EXPECT_TRUE(s.gated);
  // Both open: the full signal.
  s = scale::compute_signal({19}, 5, options, {80, 300});
  EXPECT_FALSE(s.gated);
  EXPECT_EQ(s.desired_tasks, 20);
  // Closed gates never hold scaling in.
  s = scale::compute_signal({2}, 30, options, {0, 0});
  EXPECT_FALSE(s.gated);
  EXPECT_EQ(s.desired_tasks, 3);
  // Unknown inputs keep a gate closed.
  s = scale::compute_signal({19}, 5, options, {});
  EXPECT_TRUE(s.gated);
  EXPECT_NE(s.gate.find("unknown"), std::string::npos);
}

TEST(InFlightSignal, WindowAveragesPerPeriodAndForgetsOldPeriods) {
  scale::SignalOptions options;
  options.period = 10s;
  options.periods = 3;
  scale::InFlightWindow window(options);
  const auto t0 = scale::InFlightWindow::Clock::time_point{} + 1h;
  // Period 0: 2, 4 -> 3; period 1: 10 -> 10; period 2: 6, 8 -> 7.
  window.add(t0, 2);
  window.add(t0 + 5s, 4);
  window.add(t0 + 12s, 10);
  window.add(t0 + 21s, 6);
  window.add(t0 + 29s, 8);
  EXPECT_EQ(window.period_averages(), (std::vector<double>{3, 10, 7}));
  EXPECT_FALSE(window.full(t0 + 29s));
  EXPECT_TRUE(window.full(t0 + 30s));
  // Period 3 begins: period 0 falls out of the three.
  window.add(t0 + 31s, 1);
  EXPECT_EQ(window.period_averages(), (std::vector<double>{10, 7, 1}));
  // A gap of several periods: only what is recent counts.
  window.add(t0 + 75s, 5);
  EXPECT_EQ(window.period_averages(), (std::vector<double>{5}));
  EXPECT_EQ(window.samples(), 7u);
}

TEST(InFlightSignal, JsonCarriesWhatKedaAndPeopleRead) {
  scale::SignalOptions options;
  options.spare = 2;
  const auto s = scale::compute_signal({7, 7}, 10, options);
  const auto doc = nlohmann::json::parse(app::signal_json(s, {{0, 7, 13}, {0.5, 7, -1}}));
  EXPECT_EQ(doc["desired_tasks"], 9);
  EXPECT_EQ(doc["utilization_percent"], 90.0);
  EXPECT_EQ(doc["in_flight_max_average"], 7.0);
  EXPECT_EQ(doc["running"], 10);
  EXPECT_EQ(doc["spare"], 2);
  EXPECT_EQ(doc["samples"].size(), 2u);
  EXPECT_EQ(doc["samples"][0]["visible"], 13.0);
  EXPECT_FALSE(doc["samples"][1].contains("visible"));
}

TEST(LatencyQuantiles, InterpolatedWithinTheBucketAsPromQLDoes) {
  prometheus::ClientMetric::Histogram h;
  h.sample_count = 100;
  // 50 below 0.01, 40 more below 0.1, 10 more below 1.
  h.bucket = {{50, 0.01}, {90, 0.1}, {100, 1.0}, {100, std::numeric_limits<double>::infinity()}};
  EXPECT_DOUBLE_EQ(app::histogram_quantile(h, 0.5), 0.01);
  EXPECT_NEAR(app::histogram_quantile(h, 0.7), 0.01 + 0.09 * 20 / 40, 1e-12);
  EXPECT_NEAR(app::histogram_quantile(h, 0.99), 0.1 + 0.9 * 9 / 10, 1e-12);
  // Beyond the last finite bound: that bound (PromQL's answer).
  h.bucket = {{10, 0.5}, {100, std::numeric_limits<double>::infinity()}};
  EXPECT_DOUBLE_EQ(app::histogram_quantile(h, 0.99), 0.5);
  h.sample_count = 0;
  EXPECT_DOUBLE_EQ(app::histogram_quantile(h, 0.5), 0);
}
