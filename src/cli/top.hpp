#pragma once
// `sluice top`: a live view of a running process, refreshed from its /metrics: rates,
// in flight, backlog, oldest age, latency quantiles over the last refresh, rejects by
// reason, receives, a sparkline of throughput; one block per pipeline. ncurses on a
// terminal (q or Ctrl-C quits, resizes are followed); plain lines otherwise.

#include <cmath>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "cli/plan.hpp"

namespace sluice::app {

struct TopOptions {
  std::string url;     // http://HOST:PORT (or .../metrics)
  std::string config;  // or a config file: its metrics.listen
  std::string interval = "1s";
  int iterations = 0;  // refreshes before exiting; 0: until q
  bool plain = false;  // lines even on a terminal
};
int run_top(const TopOptions& options);

// What one pipeline did between two scrapes (rates per second, latencies in seconds;
// NaN when the scrape had nothing to say).
struct PipelineFigures {
  std::string name;
  double received_per_s = 0, written_per_s = 0, duplicates_per_s = 0, rejected_per_s = 0,
         failed_per_s = 0;
  double received = 0, written = 0, duplicates = 0, rejected = 0;  // since the process started
  double in_flight = 0, max_in_flight = NAN, acks_pending = 0, receives = 0;
  double backlog_visible = NAN, backlog_in_flight = NAN, dead_letters = NAN, oldest_age_s = NAN;
  bool ready = false, paused = false;
  struct Latency {
    double p50 = NAN, p99 = NAN;
  } receive, handler, sink_batch;
  std::map<std::string, std::pair<double, double>> rejects;  // reason -> (total, per second)
};
std::vector<PipelineFigures> figures_between(const Scrape& previous, const Scrape& current);

// The screen as lines of at most `width` columns; `history` is each pipeline's recent
// received rates, oldest first (the sparkline); `unicode`: block characters, else ASCII.
std::vector<std::string> render_screen(const std::vector<PipelineFigures>& pipelines,
                                       const std::map<std::string, std::deque<double>>& history,
                                       const std::string& title, int width, bool unicode);
// One line per pipeline, for a pipe or a log.
std::string plain_line(const PipelineFigures& figures);

}  // namespace sluice::app
