// The in-flight scaling signal (pure logic), the histogram quantiles behind
// sluice_latency_quantile_seconds, the autoscale JSON document, and the one trigger
// scaler both sources' workers use.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "cli/autoscale.hpp"
#include "observe/metrics.hpp"
#include "runtime/trigger_scaler.hpp"
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
  // A fractional average: utilization unrounded (100 x (9.4 + 2) / 10), desired rounded up.
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

// ------------------------------------------------------------ concurrency: auto
#include "runtime/auto_concurrency.hpp"

namespace {

// A queue behind a round trip: each receive loop brings 10 messages per round trip
// until the server's ceiling (messages per second) is reached; `asked` below 10 when
// permits are short. Runs `seconds` of simulated time; returns the levels seen.
// The controller with the container's defaults but `max`, and a clock an hour in.
runtime::AutoConcurrency auto_concurrency(int max) {
  runtime::AutoConcurrency::Config config;
  config.max = max;
  return runtime::AutoConcurrency(config);
}
const auto kStart = runtime::AutoConcurrency::Clock::time_point{} + std::chrono::hours(1);

struct SimulatedQueue {
  double ceiling;                 // messages per second the server gives at most
  std::chrono::milliseconds rtt;  // one receive's round trip
  int permits_per_poll = 10;      // what a loop may ask for
  double consumer = 1e12;         // messages per second the handlers take at most
  bool idle = false;
  double owed = 0;
  double exponent = 0;  // > 0: the server gives ceiling x loops^exponent (still rising)

  // Messages per second at `loops` receives.
  double rate(int loops) const {
    const double rtt_s = std::chrono::duration<double>(rtt).count();
    return std::min(loops * permits_per_poll / rtt_s, ceiling * std::pow(loops, exponent));
  }

  std::vector<int> run(runtime::AutoConcurrency& auto_c, double seconds,
                       runtime::AutoConcurrency::Clock::time_point& now) {
    std::vector<int> levels;
    const auto end = now + std::chrono::duration_cast<std::chrono::nanoseconds>(
                               std::chrono::duration<double>(seconds));
    while (now < end) {
      const int loops = std::max(auto_c.level(), 1);
      // Each loop completes one receive per round trip; the server shares its ceiling,
      // the consumer its rate.
      const double rtt_s = std::chrono::duration<double>(rtt).count();
      const double per_poll = std::min(static_cast<double>(permits_per_poll),
                                       ceiling * std::pow(loops, exponent) * rtt_s / loops);
      // A slower consumer frees permits at its own pace: each loop's cycle stretches by
      // the wait for them.
      const double cycle = std::max(rtt_s, loops * per_poll / consumer);
      const auto wait = std::chrono::duration_cast<std::chrono::nanoseconds>(
          std::chrono::duration<double>(cycle - rtt_s));
      const auto step = (std::chrono::nanoseconds(rtt) + wait) / loops;
      for (int i = 0; i < loops; ++i) {
        now += step;
        // Whole messages, the fractions carried: the server gives exactly its ceiling.
        owed += idle ? 0 : per_poll;
        const auto got = static_cast<std::size_t>(owed);
        owed -= static_cast<double>(got);
        auto_c.after_poll(got, permits_per_poll, 10, rtt, now, wait);
      }
      levels.push_back(auto_c.level());
    }
    return levels;
  }
};

}  // namespace

TEST(AutoConcurrency, ClimbsToThePlateauAndStaysThere) {
  auto auto_c = auto_concurrency(100);
  auto now = kStart;
  // 50 ms round trips, a ceiling of 4,000 messages/s: linear up to 20 loops.
  SimulatedQueue queue{4000, std::chrono::milliseconds(50)};
  queue.run(auto_c, 30, now);
  EXPECT_EQ(auto_c.phase(), runtime::AutoConcurrency::Phase::holding);
  EXPECT_GE(auto_c.level(), 19);  // 0.95 of the ceiling needs 19
  EXPECT_LE(auto_c.level(), 24);
  // No oscillation: over the next minute, at most the probes of the hold (a step up or,
  // with partial receives, a quarter down, and back), and back where it settled.
  const int settled = auto_c.level();
  const auto levels = queue.run(auto_c, 60, now);
  int changes = 0;
  for (std::size_t i = 1; i < levels.size(); ++i) changes += levels[i] != levels[i - 1];
  EXPECT_LE(changes, 4);
  EXPECT_GE(*std::min_element(levels.begin(), levels.end()), settled * 3 / 4);
  EXPECT_EQ(auto_c.level(), settled);
}

// Settled at 20 receives, then the server slows to a quarter: receives come back partial,
// and the same messages would come in fewer requests. It steps down while the rate
// holds, to the fewest receives that still bring it (1,000 msg/s x 50 ms = 5 full ones).
TEST(AutoConcurrency, APlateauThatMovesDownBringsTheReceivesDown) {
  auto auto_c = auto_concurrency(100);
  auto now = kStart;
  SimulatedQueue queue{4000, std::chrono::milliseconds(50)};
  queue.run(auto_c, 30, now);
  ASSERT_GE(auto_c.level(), 19);
  queue.ceiling = 1000;
  const auto levels = queue.run(auto_c, 120, now);
  EXPECT_GE(auto_c.level(), 5);
  EXPECT_LE(auto_c.level(), 8);
  // Never below what the rate needs for longer than one probe.
  EXPECT_GE(*std::min_element(levels.begin(), levels.end()), 4);
}

// A server that still gives a little more to every added receive, with receives coming
// back partial: thinning tries fewer every hold, and each try is measured against the
// rate where thinning began, so losses do not add up hold after hold.
TEST(AutoConcurrency, ThinningNeverLosesMoreThanItsMarginOverTime) {
  auto auto_c = auto_concurrency(100);
  auto now = kStart;
  SimulatedQueue queue{8000, std::chrono::milliseconds(50)};
  queue.run(auto_c, 30, now);
  ASSERT_GE(auto_c.level(), 38);  // 8,000 msg/s x 50 ms = 40 full receives
  // The server changes: fewer messages, still a little more for every added receive.
  queue.ceiling = 1700;
  queue.exponent = 0.15;
  const double settled = queue.rate(auto_c.level());
  const auto levels = queue.run(auto_c, 600, now);
  // Every level it held, not only the last: none below 95 % of the settled rate, save
  // the one-window probes it takes back (a window is about a second: 20 round trips).
  std::size_t run_start = 0;
  for (std::size_t i = 1; i <= levels.size(); ++i) {
    if (i < levels.size() && levels[i] == levels[run_start]) continue;
    if (i - run_start > 60) {
      EXPECT_GE(queue.rate(levels[run_start]), 0.95 * settled) << levels[run_start];
    }
    run_start = i;
  }
  EXPECT_GE(queue.rate(auto_c.level()), 0.95 * settled);
}

TEST(AutoConcurrency, FollowsTheLatencyAndNeverPassesTheMaximum) {
  for (const auto& [rtt_ms, ceiling, expected_min, expected_max] :
       std::vector<std::tuple<int, double, int, int>>{{20, 4000, 7, 10}, {5, 4000, 1, 3}}) {
    auto auto_c = auto_concurrency(100);
    auto now = kStart;
    SimulatedQueue queue{ceiling, std::chrono::milliseconds(rtt_ms)};
    queue.run(auto_c, 30, now);
    EXPECT_GE(auto_c.level(), expected_min) << rtt_ms;
    EXPECT_LE(auto_c.level(), expected_max) << rtt_ms;
  }
  // A ceiling beyond reach: it stops at the maximum (max_in_flight / batch).
  auto auto_c = auto_concurrency(12);
  auto now = kStart;
  SimulatedQueue queue{1e9, std::chrono::milliseconds(50)};
  const auto levels = queue.run(auto_c, 30, now);
  EXPECT_EQ(*std::max_element(levels.begin(), levels.end()), 12);
  EXPECT_EQ(auto_c.level(), 12);
}

TEST(AutoConcurrency, ASlowConsumerGetsFewerReceivesAndIdleFallsBackToOne) {
  auto auto_c = auto_concurrency(100);
  auto now = kStart;
  SimulatedQueue queue{4000, std::chrono::milliseconds(50)};
  queue.run(auto_c, 30, now);
  ASSERT_GE(auto_c.level(), 19);
  // The sink slows to 800 messages/s: the loops wait for permits. Fewer receives take
  // as much (4 loops of 10 per 50 ms is 800/s): it steps down and never up.
  queue.consumer = 800;
  const int before = auto_c.level();
  const auto levels = queue.run(auto_c, 40, now);
  EXPECT_GE(auto_c.level(), 3);
  EXPECT_LE(auto_c.level(), before / 2);
  // Never above where it was (a step down that lost throughput is taken back).
  EXPECT_LE(*std::max_element(levels.begin(), levels.end()), before);
  // The sink recovers: it climbs again; then the queue empties: one receive.
  queue.consumer = 1e12;
  queue.run(auto_c, 60, now);
  EXPECT_GE(auto_c.level(), 19);
  queue.idle = true;
  queue.run(auto_c, 5, now);
  EXPECT_EQ(auto_c.level(), 1);
}

// ------------------------------------------------------------ sluice plan's parser
#include "cli/plan.hpp"

TEST(PlanMetrics, ParsesTheExpositionAndRefusesWhatIsNot) {
  const auto scrape = app::parse_exposition(
      "# HELP a b\n# TYPE a counter\n"
      "sluice_messages_settled_total{outcome=\"acked\"} 12\n"
      "sluice_messages_settled_total{outcome=\"rejected\"} 3\n"
      "sluice_setting{name=\"max_in_flight\",x=\"a\\\"b,c\"} 250\n"
      "sluice_poll_latency_seconds_bucket{le=\"+Inf\"} 7\n"
      "plain 1.5e3\n",
      2.0);
  EXPECT_DOUBLE_EQ(scrape.sum("sluice_messages_settled_total"), 15);
  EXPECT_DOUBLE_EQ(scrape.labelled("sluice_setting", "name", "max_in_flight", 0), 250);
  EXPECT_DOUBLE_EQ(scrape.labelled("sluice_setting", "x", "a\"b,c", 0), 250);
  EXPECT_DOUBLE_EQ(scrape.sum("plain"), 1500);
  EXPECT_DOUBLE_EQ(scrape.sum("absent"), 0);
  for (const char* bad :
       {"name{le=\"1\" 3\n", "name 12abc\n", "name{le=1} 3\n", "{x=\"1\"} 2\n", "lonely\n"})
    EXPECT_THROW(app::parse_exposition(bad, 0), std::invalid_argument) << bad;
  // Two scrapes with no work between them: nothing to size from; a process that is not
  // sluice run: said so.
  EXPECT_THROW(app::measure({scrape, scrape}, 1), std::runtime_error);
  const auto other = app::parse_exposition("process_cpu_seconds_total 3\n", 0);
  try {
    app::measure({other, other}, 1);
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("is this a sluice run endpoint"), std::string::npos);
  }
}

// sluice plan against a process running several pipelines: one is chosen by its label,
// and the choice is required (a sum over pipelines would size none of them).
TEST(PlanMeasure, APipelineIsChosenByItsLabel) {
  const std::string text =
      "sluice_setting{name=\"max_in_flight\",pipeline=\"a\"} 100\n"
      "sluice_setting{name=\"max_in_flight\",pipeline=\"b\"} 400\n"
      "sluice_messages_received_total{pipeline=\"a\"} 10\n"
      "sluice_messages_received_total{pipeline=\"b\"} 90\n";
  const auto both = app::parse_exposition(text, 0);
  const auto b = app::one_pipeline(both, "b");
  EXPECT_EQ(b.labelled("sluice_setting", "name", "max_in_flight", 0), 400);
  EXPECT_EQ(b.sum("sluice_messages_received_total"), 90);
  try {
    app::one_pipeline(both, "");
    ADD_FAILURE() << "no choice among two";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()),
              "the process runs several pipelines (a, b): choose one with --pipeline");
  }
  try {
    app::one_pipeline(both, "c");
    ADD_FAILURE() << "a pipeline that is not there";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "--pipeline c: no such pipeline here (a, b)");
  }
  const auto one = app::parse_exposition("sluice_messages_received_total{pipeline=\"a\"} 3\n", 0);
  EXPECT_EQ(app::one_pipeline(one, "").sum("sluice_messages_received_total"), 3)
      << "one pipeline: no choice needed";
}

// A pipeline on concurrency: auto sizes its own receives: sluice plan keeps auto (and
// says what fixed range the arithmetic gives), so `--write` does not switch it off.
TEST(PlanRecommend, ConcurrencyAutoIsKeptWithTheArithmeticBeside) {
  app::Measured m;
  m.rate = 1000;
  m.min_sustained_rate = 800;
  m.receive_mean_s = 0.05;  // 1000/s x 0.05 s / 10 = 5 loops
  m.max_in_flight = 100;
  m.sink_batch_size = 100;
  auto concurrency = [&] {
    for (const auto& r : app::recommend(m, 5))
      if (r.key == "source.concurrency") return r;
    return app::Recommendation{};
  };
  EXPECT_EQ(concurrency().value, "5-10");
  m.auto_receives = true;
  const auto kept = concurrency();
  EXPECT_EQ(kept.value, "auto");
  EXPECT_NE(kept.formula.find("a fixed 5-10"), std::string::npos) << kept.formula;
}

// The receive loops and RabbitMQ's consumers scale by one rule; the two details in which
// they differ are options, decided here.
using Scaler = runtime::TriggerScaler<std::chrono::steady_clock>;
using Observation = Scaler::Observation;
using Decision = Scaler::Decision;

Scaler::Config trigger_config(bool restart) {
  Scaler::Config c;
  c.min = 1;
  c.max = 3;
  c.busy_trigger = c.idle_trigger = 3;
  c.start_interval = 10s;
  c.stop_interval = 10s;
  c.restart_count_when_refused = restart;
  return c;
}

TEST(TriggerScaler, StartsOnTheTriggerthBusyInARowAndStopsOnTheIdleOnes) {
  Scaler s(trigger_config(false));
  Scaler::Counts counts;
  auto now = std::chrono::steady_clock::now() + 1h;
  EXPECT_EQ(s.observe(counts, Observation::busy, 1, true, now), Decision::keep);
  EXPECT_EQ(s.observe(counts, Observation::busy, 1, true, now), Decision::keep);
  EXPECT_EQ(s.observe(counts, Observation::busy, 1, true, now), Decision::start_another);
  EXPECT_EQ(counts.busy, 0);
  for (int i = 0; i < 2; ++i)
    EXPECT_EQ(s.observe(counts, Observation::idle, 2, true, now), Decision::keep);
  EXPECT_EQ(s.observe(counts, Observation::idle, 2, true, now), Decision::stop_this);
  // Never below the minimum, nor above a lowered maximum.
  for (int i = 0; i < 5; ++i)
    EXPECT_EQ(s.observe(counts, Observation::idle, 1, true, now + 1h), Decision::keep);
  s.reconfigure(1, 1);
  EXPECT_EQ(s.observe(counts, Observation::partial, 2, true, now), Decision::stop_this);
}

TEST(TriggerScaler, WhatBreaksARunPartialResetsHoldingKeeps) {
  Scaler s(trigger_config(false));
  Scaler::Counts counts;
  const auto now = std::chrono::steady_clock::now() + 1h;
  s.observe(counts, Observation::busy, 1, true, now);
  s.observe(counts, Observation::busy, 1, true, now);
  // A consumer whose work is stuck downstream: the run goes on.
  EXPECT_EQ(s.observe(counts, Observation::holding, 1, true, now), Decision::keep);
  EXPECT_EQ(s.observe(counts, Observation::busy, 1, true, now), Decision::start_another);
  s.observe(counts, Observation::busy, 1, true, now + 20s);
  s.observe(counts, Observation::busy, 1, true, now + 20s);
  // A receive neither full nor empty: the run starts again.
  EXPECT_EQ(s.observe(counts, Observation::partial, 1, true, now + 20s), Decision::keep);
  EXPECT_EQ(s.observe(counts, Observation::busy, 1, true, now + 20s), Decision::keep);
}

TEST(TriggerScaler, ARefusedStartComesAsSoonAsAllowedUnlessTheCountRestarts) {
  for (const bool restart : {false, true}) {
    Scaler s(trigger_config(restart));
    Scaler::Counts counts;
    const auto now = std::chrono::steady_clock::now() + 1h;
    for (int i = 0; i < 3; ++i) s.observe(counts, Observation::busy, 1, false, now);  // no permits
    // Permits again: the receive loop (keeps counting) starts at once; the consumer
    // (Spring's count restarts on the trigger) needs another full run.
    EXPECT_EQ(s.observe(counts, Observation::busy, 1, true, now),
              restart ? Decision::keep : Decision::start_another)
        << "restart_count_when_refused " << restart;
  }
}
