#pragma once
// `sluice plan`: the consumer sizing usually done by hand, computed from a running
// pipeline's /metrics.
// It scrapes the endpoint for a while, measures rates and latency quantiles over that
// window (histogram deltas, not since start), and recommends visibility_timeout,
// max_in_flight, concurrency, sink.writers and sink.batch_size, each with the figures
// and the formula that gave it.
#include <prometheus/client_metric.h>

#include <map>
#include <string>
#include <vector>

namespace sluice::app {

struct PlanOptions {
  std::string metrics_url = "http://127.0.0.1:9464/metrics";
  std::string duration = "30s";
  std::string interval = "1s";
  std::string window = "5s";     // the spans whose slowest rate is "min sustained"
  std::string headroom = "10s";  // headroom for pauses such as garbage collection
  std::string output = "text";   // or json
  std::string write;             // a YAML fragment to this file
  std::string pipeline;          // of a process running several (its pipeline label)
};

int run_plan(const PlanOptions& options);

// One scrape of a Prometheus text exposition: every sample by name, with its labels.
struct Sample {
  std::map<std::string, std::string> labels;
  double value = 0;
};
struct Scrape {
  double at_s = 0;
  std::map<std::string, std::vector<Sample>> samples;
  // The sum over every label set; 0 when absent.
  double sum(const std::string& name) const;
  // The value with this label (name="value"); fallback when absent.
  double labelled(const std::string& name, const std::string& label, const std::string& value,
                  double fallback) const;
};
// Throws std::invalid_argument on a line that is not the text format.
Scrape parse_exposition(const std::string& text, double at_s);
// The series of one pipeline (label pipeline="NAME"), when `pipeline` is given; else
// the scrape as it is, as long as it holds one pipeline's. Throws
// std::invalid_argument naming the pipelines there when the choice is missing or wrong.
Scrape one_pipeline(Scrape scrape, const std::string& pipeline);
// The histogram `base` over the span between two scrapes (bucket deltas).
prometheus::ClientMetric::Histogram histogram_between(const Scrape& first, const Scrape& last,
                                                      const std::string& base);

struct Measured {
  double seconds = 0;
  double rate = 0;                // messages settled per second over the whole observation
  double min_sustained_rate = 0;  // the slowest window with work
  double peak_rate = 0;
  double in_flight_mean = 0, in_flight_peak = 0;
  double receives_per_s = 0, messages_per_receive = 0;
  double receive_p50_s = 0, receive_p99_s = 0, receive_mean_s = 0;
  double handler_p50_s = 0, handler_p99_s = 0;
  double sink_batch_p50_s = 0, sink_batch_p99_s = 0, sink_batch_mean_s = 0;
  double batches_per_s = 0, batch_size_mean = 0;
  // the running configuration (sluice_setting)
  double max_in_flight = 0, max_receives = 0, sink_writers = 0, sink_batch_size = 0;
  bool auto_receives = false;        // source.concurrency: auto (it sizes its own receives)
  double visibility_timeout_s = -1;  // -1: not SQS
};

struct Recommendation {
  std::string key;      // the configuration key
  std::string value;    // as YAML takes it
  std::string formula;  // with the figures put in
};

// Throws std::runtime_error when the scrapes show no work (nothing to size from).
Measured measure(const std::vector<Scrape>& scrapes, double window_s);
std::vector<Recommendation> recommend(const Measured& measured, double headroom_s);

// A figure as the plan prints it (6 significant digits).
std::string number(double value, int precision = 6);

}  // namespace sluice::app
