#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <sstream>
#include <stdexcept>

#include "cli/plan.hpp"
#include "observe/metrics.hpp"

// sluice plan's arithmetic: the exposition parser, the measurements over the scrapes
// and the recommendations. Pure (no I/O): fuzzed and unit tested.
namespace sluice::app {

double Scrape::sum(const std::string& name) const {
  auto it = samples.find(name);
  double total = 0;
  if (it != samples.end())
    for (const auto& s : it->second) total += s.value;
  return total;
}

double Scrape::labelled(const std::string& name, const std::string& label, const std::string& value,
                        double fallback) const {
  auto it = samples.find(name);
  if (it == samples.end()) return fallback;
  for (const auto& s : it->second) {
    auto l = s.labels.find(label);
    if (l != s.labels.end() && l->second == value) return s.value;
  }
  return fallback;
}

Scrape parse_exposition(const std::string& text, double at_s) {
  Scrape scrape;
  scrape.at_s = at_s;
  std::istringstream lines(text);
  std::string line;
  int number = 0;
  auto bad = [&](const std::string& why) {
    return std::invalid_argument("line " + std::to_string(number) + " of the metrics: " + why +
                                 ": '" + line.substr(0, 80) + "'");
  };
  while (std::getline(lines, line)) {
    ++number;
    if (line.empty() || line[0] == '#') continue;
    Sample sample;
    std::size_t at = line.find_first_of("{ ");
    if (at == std::string::npos || at == 0) throw bad("no value");
    const std::string name = line.substr(0, at);
    if (line[at] == '{') {
      ++at;
      while (at < line.size() && line[at] != '}') {
        const auto eq = line.find("=\"", at);
        if (eq == std::string::npos) throw bad("a label without a quoted value");
        const std::string key = line.substr(at, eq - at);
        std::string value;
        std::size_t i = eq + 2;
        for (; i < line.size() && line[i] != '"'; ++i) {
          if (line[i] == '\\' && i + 1 < line.size()) ++i;
          value += line[i];
        }
        if (i >= line.size()) throw bad("an unterminated label value");
        sample.labels[key] = value;
        at = i + 1;
        if (at < line.size() && line[at] == ',') ++at;
      }
      if (at >= line.size()) throw bad("unterminated labels");
      ++at;
    }
    std::istringstream rest(line.substr(at));
    std::string value;
    rest >> value;
    try {
      std::size_t used = 0;
      sample.value = value == "+Inf"   ? std::numeric_limits<double>::infinity()
                     : value == "-Inf" ? -std::numeric_limits<double>::infinity()
                                       : std::stod(value, &used);
      if (value != "+Inf" && value != "-Inf" && used != value.size()) throw bad("a bad value");
    } catch (const std::logic_error&) {
      throw bad("a value that is not a number");
    }
    scrape.samples[name].push_back(std::move(sample));
  }
  return scrape;
}

Scrape one_pipeline(Scrape scrape, const std::string& pipeline) {
  std::set<std::string> names;
  for (const auto& [name, samples] : scrape.samples)
    for (const auto& s : samples)
      if (const auto it = s.labels.find("pipeline"); it != s.labels.end()) names.insert(it->second);
  std::string listed;
  for (const auto& n : names) listed += (listed.empty() ? "" : ", ") + n;
  if (pipeline.empty()) {
    if (names.size() > 1)
      throw std::invalid_argument("the process runs several pipelines (" + listed +
                                  "): choose one with --pipeline");
    return scrape;
  }
  if (!names.count(pipeline))
    throw std::invalid_argument("--pipeline " + pipeline + ": no such pipeline here (" +
                                (listed.empty() ? std::string("no pipeline label") : listed) + ")");
  for (auto& [name, samples] : scrape.samples)
    std::erase_if(samples, [&](const Sample& s) {
      const auto it = s.labels.find("pipeline");
      return it != s.labels.end() && it->second != pipeline;
    });
  return scrape;
}

// The histogram `base` over the span between two scrapes (bucket deltas).
prometheus::ClientMetric::Histogram histogram_between(const Scrape& first, const Scrape& last,
                                                      const std::string& base) {
  prometheus::ClientMetric::Histogram h;
  const auto bucket = base + "_bucket";
  auto it = last.samples.find(bucket);
  if (it == last.samples.end()) return h;
  std::vector<std::pair<double, double>> buckets;  // (le, count)
  for (const auto& s : it->second) {
    const std::string le = s.labels.count("le") ? s.labels.at("le") : "+Inf";
    const double bound = le == "+Inf" ? std::numeric_limits<double>::infinity() : std::stod(le);
    buckets.emplace_back(bound, s.value - first.labelled(bucket, "le", le, 0));
  }
  std::sort(buckets.begin(), buckets.end());
  for (const auto& [bound, count] : buckets)
    h.bucket.push_back({static_cast<std::uint64_t>(std::llround(std::max(count, 0.0))), bound});
  h.sample_count = h.bucket.empty() ? 0 : h.bucket.back().cumulative_count;
  h.sample_sum = last.sum(base + "_sum") - first.sum(base + "_sum");
  return h;
}

namespace {

double mean_of(const prometheus::ClientMetric::Histogram& h) {
  return h.sample_count ? h.sample_sum / static_cast<double>(h.sample_count) : 0;
}

}  // namespace

std::string number(double v, int precision) {
  std::ostringstream out;
  out.precision(precision);
  out << v;
  return out.str();
}

Measured measure(const std::vector<Scrape>& scrapes, double window_s) {
  if (scrapes.size() < 2) throw std::runtime_error("at least two scrapes are needed");
  const Scrape& first = scrapes.front();
  const Scrape& last = scrapes.back();
  Measured m;
  if (last.labelled("sluice_setting", "name", "max_in_flight", 0) <= 0)
    throw std::runtime_error(
        "the metrics carry no sluice_setting{name=\"max_in_flight\"}: is this a sluice run "
        "endpoint?");
  m.seconds = last.at_s - first.at_s;
  const std::string settled = "sluice_messages_settled_total";
  const double total = last.sum(settled) - first.sum(settled);
  if (total <= 0 || m.seconds <= 0)
    throw std::runtime_error(
        "no message was settled while observing: run sluice plan while the pipeline works "
        "through a backlog");
  m.rate = total / m.seconds;
  m.min_sustained_rate = std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i < scrapes.size(); ++i) {
    std::size_t j = i + 1;
    while (j < scrapes.size() && scrapes[j].at_s - scrapes[i].at_s < window_s) ++j;
    if (j >= scrapes.size()) break;
    const double done = scrapes[j].sum(settled) - scrapes[i].sum(settled);
    if (done <= 0) continue;  // idle spans say nothing of the processing rate
    const double rate = done / (scrapes[j].at_s - scrapes[i].at_s);
    m.min_sustained_rate = std::min(m.min_sustained_rate, rate);
    m.peak_rate = std::max(m.peak_rate, rate);
  }
  if (!std::isfinite(m.min_sustained_rate)) m.min_sustained_rate = m.peak_rate = m.rate;
  for (const auto& s : scrapes) {
    const double held = s.sum("sluice_messages_in_flight");
    m.in_flight_mean += held / static_cast<double>(scrapes.size());
    m.in_flight_peak = std::max(m.in_flight_peak, held);
  }
  const auto receive = histogram_between(first, last, "sluice_poll_latency_seconds");
  const auto handler = histogram_between(first, last, "sluice_stage_latency_seconds");
  const auto sink = histogram_between(first, last, "sluice_sink_write_latency_seconds");
  const auto batch = histogram_between(first, last, "sluice_sink_batch_size");
  m.receives_per_s = static_cast<double>(receive.sample_count) / m.seconds;
  const double received =
      last.sum("sluice_messages_received_total") - first.sum("sluice_messages_received_total");
  m.messages_per_receive =
      receive.sample_count ? received / static_cast<double>(receive.sample_count) : 0;
  m.receive_p50_s = histogram_quantile(receive, 0.5);
  m.receive_p99_s = histogram_quantile(receive, 0.99);
  m.receive_mean_s = mean_of(receive);
  m.handler_p50_s = histogram_quantile(handler, 0.5);
  m.handler_p99_s = histogram_quantile(handler, 0.99);
  m.sink_batch_p50_s = histogram_quantile(sink, 0.5);
  m.sink_batch_p99_s = histogram_quantile(sink, 0.99);
  m.sink_batch_mean_s = mean_of(sink);
  m.batches_per_s = static_cast<double>(sink.sample_count) / m.seconds;
  m.batch_size_mean = mean_of(batch);
  m.max_in_flight = last.labelled("sluice_setting", "name", "max_in_flight", 0);
  m.max_receives = last.labelled("sluice_setting", "name", "max_concurrent_receives", 0);
  m.auto_receives = last.labelled("sluice_setting", "name", "auto_concurrency", 0) > 0;
  m.sink_writers = last.labelled("sluice_setting", "name", "sink_writers", 0);
  m.sink_batch_size = last.labelled("sluice_setting", "name", "sink_batch_size", 0);
  m.visibility_timeout_s =
      last.labelled("sluice_setting", "name", "visibility_timeout_seconds", -1);
  return m;
}

std::vector<Recommendation> recommend(const Measured& m, double headroom_s) {
  std::vector<Recommendation> out;
  // Held messages at the limit: the limit is what holds throughput (raise it while
  // throughput rises); otherwise room above the peak seen.
  const bool saturated = m.in_flight_peak >= 0.9 * m.max_in_flight;
  const double in_flight = saturated ? std::min(2 * m.max_in_flight, 120000.0)
                                     : std::max(10.0, std::ceil(1.5 * m.in_flight_peak));
  out.push_back({"source.max_in_flight", number(in_flight, 10),
                 saturated
                     ? "2 x max_in_flight " + number(m.max_in_flight) + " (peak held " +
                           number(m.in_flight_peak) + " >= 90 % of it: the limit held throughput)"
                     : "max(10, ceil(1.5 x peak held " + number(m.in_flight_peak) + "))"});
  // Visibility timeout long enough to drain every held message at the slowest sustained
  // rate: queue_capacity / min_sustained_processing_rate + write p99 + headroom.
  const double visibility = std::clamp(
      std::ceil(in_flight / m.min_sustained_rate + m.sink_batch_p99_s + headroom_s), 1.0, 43200.0);
  out.push_back({"source.sqs.visibility_timeout", number(visibility, 10) + "s",
                 "ceil(max_in_flight " + number(in_flight) +
                     " (as recommended) / min sustained rate " + number(m.min_sustained_rate) +
                     "/s + sink batch p99 " + number(m.sink_batch_p99_s) + "s + headroom " +
                     number(headroom_s) + "s)"});
  // A receive brings at most 10 messages per round trip: loops = rate x latency / 10.
  const double loops = m.rate * m.receive_mean_s / 10.0;
  const double min_loops = std::max(1.0, std::ceil(loops));
  const double max_loops = std::max(min_loops + 1, std::ceil(2 * loops));
  const std::string arithmetic = "rate " + number(m.rate) + "/s x mean receive " +
                                 number(m.receive_mean_s) +
                                 "s / 10 per receive = " + number(loops) + " loops";
  // A pipeline on auto measures its receives while it runs: kept, the arithmetic beside it.
  if (m.auto_receives)
    out.push_back({"source.concurrency", "auto",
                   "kept: the pipeline sizes its receives by measuring (" + arithmetic +
                       ", a fixed " + number(min_loops, 10) + "-" + number(max_loops, 10) + ")"});
  else
    out.push_back({"source.concurrency", number(min_loops, 10) + "-" + number(max_loops, 10),
                   arithmetic + "; MIN ceil, MAX 2x"});
  // Writers busy (writer-seconds per second), at most 70 % each.
  const double busy = m.batches_per_s * m.sink_batch_mean_s;
  out.push_back({"sink.writers", number(std::max(1.0, std::ceil(busy / 0.7)), 10),
                 "ceil(batches " + number(m.batches_per_s) + "/s x mean batch write " +
                     number(m.sink_batch_mean_s) + "s = " + number(busy) + " busy writers / 0.7)"});
  const bool full = m.sink_batch_size > 0 && m.batch_size_mean >= 0.9 * m.sink_batch_size;
  out.push_back({"sink.batch_size",
                 number(full ? std::min(1000.0, 2 * m.sink_batch_size) : m.sink_batch_size, 10),
                 full ? "2 x batch_size " + number(m.sink_batch_size) + " (mean batch " +
                            number(m.batch_size_mean) + " >= 90 %: batches are full)"
                      : "batch_size " + number(m.sink_batch_size) + " kept (mean batch " +
                            number(m.batch_size_mean) + ": batches are not full)"});
  return out;
}

}  // namespace sluice::app
