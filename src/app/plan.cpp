#include "app/plan.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "app/config.hpp"
#include "app/metrics.hpp"
#include "common/redact.hpp"
#include "sluice/aws/error.hpp"
#include "sluice/aws/http.hpp"

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

namespace {

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

double mean_of(const prometheus::ClientMetric::Histogram& h) {
  return h.sample_count ? h.sample_sum / static_cast<double>(h.sample_count) : 0;
}

std::string number(double v, int precision = 6) {
  std::ostringstream out;
  out.precision(precision);
  out << v;
  return out.str();
}

}  // namespace

Measured measure(const std::vector<Scrape>& scrapes, double window_s) {
  if (scrapes.size() < 2) throw std::runtime_error("at least two scrapes are needed");
  const Scrape& first = scrapes.front();
  const Scrape& last = scrapes.back();
  Measured m;
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
  m.sink_writers = last.labelled("sluice_setting", "name", "sink_writers", 0);
  m.sink_batch_size = last.labelled("sluice_setting", "name", "sink_batch_size", 0);
  m.visibility_timeout_s =
      last.labelled("sluice_setting", "name", "visibility_timeout_seconds", -1);
  if (m.max_in_flight <= 0)
    throw std::runtime_error(
        "the metrics carry no sluice_setting{name=\"max_in_flight\"}: is this a sluice run "
        "endpoint?");
  return m;
}

std::vector<Recommendation> recommend(const Measured& m, double headroom_s) {
  std::vector<Recommendation> out;
  // Held messages at the limit: the limit is what holds throughput (seed 001: raise it
  // while throughput rises); otherwise room above the peak seen.
  const bool saturated = m.in_flight_peak >= 0.9 * m.max_in_flight;
  const double in_flight = saturated ? std::min(2 * m.max_in_flight, 120000.0)
                                     : std::max(10.0, std::ceil(1.5 * m.in_flight_peak));
  out.push_back({"source.max_in_flight", number(in_flight, 10),
                 saturated
                     ? "2 x max_in_flight " + number(m.max_in_flight) + " (peak held " +
                           number(m.in_flight_peak) + " >= 90 % of it: the limit held throughput)"
                     : "max(10, ceil(1.5 x peak held " + number(m.in_flight_peak) + "))"});
  // Seed 001: queue_capacity / min_sustained_processing_rate + write p99 + headroom.
  const double visibility = std::clamp(
      std::ceil(in_flight / m.min_sustained_rate + m.sink_batch_p99_s + headroom_s), 1.0, 43200.0);
  out.push_back({"source.visibility_timeout", number(visibility, 10) + "s",
                 "ceil(max_in_flight " + number(in_flight) +
                     " (as recommended) / min sustained rate " + number(m.min_sustained_rate) +
                     "/s + sink batch p99 " + number(m.sink_batch_p99_s) + "s + headroom " +
                     number(headroom_s) + "s)"});
  // A receive brings at most 10 messages per round trip: loops = rate x latency / 10.
  const double loops = m.rate * m.receive_mean_s / 10.0;
  const double min_loops = std::max(1.0, std::ceil(loops));
  const double max_loops = std::max(min_loops + 1, std::ceil(2 * loops));
  out.push_back({"source.concurrency", number(min_loops, 10) + "-" + number(max_loops, 10),
                 "rate " + number(m.rate) + "/s x mean receive " + number(m.receive_mean_s) +
                     "s / 10 per receive = " + number(loops) + " loops; MIN ceil, MAX 2x"});
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

namespace {

std::string measured_json(const Measured& m) {
  return nlohmann::json{{"seconds", m.seconds},
                        {"rate", m.rate},
                        {"min_sustained_rate", m.min_sustained_rate},
                        {"peak_rate", m.peak_rate},
                        {"in_flight_mean", m.in_flight_mean},
                        {"in_flight_peak", m.in_flight_peak},
                        {"receives_per_s", m.receives_per_s},
                        {"messages_per_receive", m.messages_per_receive},
                        {"receive_p50_s", m.receive_p50_s},
                        {"receive_p99_s", m.receive_p99_s},
                        {"receive_mean_s", m.receive_mean_s},
                        {"handler_p50_s", m.handler_p50_s},
                        {"handler_p99_s", m.handler_p99_s},
                        {"sink_batch_p50_s", m.sink_batch_p50_s},
                        {"sink_batch_p99_s", m.sink_batch_p99_s},
                        {"sink_batch_mean_s", m.sink_batch_mean_s},
                        {"batches_per_s", m.batches_per_s},
                        {"batch_size_mean", m.batch_size_mean},
                        {"max_in_flight", m.max_in_flight},
                        {"max_concurrent_receives", m.max_receives},
                        {"sink_writers", m.sink_writers},
                        {"sink_batch_size", m.sink_batch_size},
                        {"visibility_timeout_s", m.visibility_timeout_s}}
      .dump();
}

std::string yaml_fragment(const std::vector<Recommendation>& recs, const std::string& origin) {
  std::ostringstream out;
  out << "# sluice plan, from " << origin << "\n";
  for (const char* section : {"source", "sink"}) {
    out << section << ":\n";
    for (const auto& r : recs)
      if (r.key.starts_with(std::string(section) + "."))
        out << "  " << r.key.substr(r.key.find('.') + 1) << ": " << r.value << "  # " << r.formula
            << "\n";
  }
  return out.str();
}

}  // namespace

int run_plan(const PlanOptions& options) {
  using std::chrono::milliseconds;
  auto duration_of = [](const std::string& flag, const std::string& value, milliseconds min,
                        milliseconds max) {
    const auto d = parse_duration(value);
    if (!d || *d < min || *d > max)
      throw std::invalid_argument(flag + ": got '" + value + "', expected " +
                                  duration_expected(min, max));
    return *d;
  };
  milliseconds duration, interval, window, headroom;
  aws::Url url;
  try {
    duration =
        duration_of("--duration", options.duration, milliseconds(1000), std::chrono::hours(1));
    interval = duration_of("--interval", options.interval, milliseconds(100), duration);
    // The default window never asks for more than the observation.
    window = options.window == "5s" && duration < milliseconds(5000)
                 ? duration
                 : duration_of("--window", options.window, interval, duration);
    headroom = duration_of("--headroom", options.headroom, milliseconds(0), std::chrono::hours(1));
    try {
      url = aws::Url::parse(options.metrics_url);
    } catch (const aws::AwsError&) {
      throw std::invalid_argument("--metrics-url: got '" +
                                  common::redact_password(options.metrics_url) +
                                  "', expected http://host:port/metrics");
    }
  } catch (const std::invalid_argument& e) {
    std::cerr << "sluice plan: " << e.what() << "\n";
    return 2;
  }
  boost::asio::io_context io;
  aws::HttpClient client(io.get_executor());
  std::vector<Scrape> scrapes;
  const auto start = std::chrono::steady_clock::now();
  try {
    for (int k = 0;; ++k) {
      const auto at = start + interval * k;
      if (at - start > duration) break;
      std::this_thread::sleep_until(at);
      aws::HttpRequest request;
      request.url = url;
      auto answer = boost::asio::co_spawn(io, client.send(request), boost::asio::use_future);
      io.restart();
      io.run();
      const auto response = answer.get();
      if (response.status != 200)
        throw std::runtime_error("--metrics-url answered " + std::to_string(response.status));
      scrapes.push_back(parse_exposition(
          response.body,
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()));
      if (options.output == "text")
        std::cerr << "\rsluice plan: " << scrapes.size() << " scrapes, "
                  << static_cast<int>(scrapes.back().at_s) << " of " << duration.count() / 1000
                  << " s" << std::flush;
    }
    if (options.output == "text") std::cerr << "\n";
    const Measured m = measure(scrapes, static_cast<double>(window.count()) / 1000);
    const auto recs = recommend(m, static_cast<double>(headroom.count()) / 1000);
    if (options.output == "json") {
      nlohmann::json doc;
      doc["measured"] = nlohmann::json::parse(measured_json(m));
      for (const auto& r : recs)
        doc["recommended"][r.key] = {{"value", r.value}, {"formula", r.formula}};
      std::cout << doc.dump() << "\n";
    } else {
      std::cout << "measured over " << number(m.seconds) << " s: " << number(m.rate)
                << " messages/s (slowest " << number(window.count() / 1000.0) << " s window "
                << number(m.min_sustained_rate) << "/s, fastest " << number(m.peak_rate)
                << "/s), held " << number(m.in_flight_mean) << " on average (peak "
                << number(m.in_flight_peak) << " of " << number(m.max_in_flight) << ")\n"
                << "  receive    p50 " << number(m.receive_p50_s * 1000) << " ms, p99 "
                << number(m.receive_p99_s * 1000) << " ms, " << number(m.messages_per_receive)
                << " messages per receive\n"
                << "  handler    p50 " << number(m.handler_p50_s * 1e6) << " us, p99 "
                << number(m.handler_p99_s * 1e6) << " us\n"
                << "  sink batch p50 " << number(m.sink_batch_p50_s * 1000) << " ms, p99 "
                << number(m.sink_batch_p99_s * 1000) << " ms, " << number(m.batch_size_mean)
                << " records per batch, " << number(m.batches_per_s) << " batches/s\n\n"
                << "recommended:\n";
      for (const auto& r : recs)
        std::cout << "  " << r.key << ": " << r.value << "\n      = " << r.formula << "\n";
    }
    if (!options.write.empty()) {
      std::ofstream out(options.write);
      out << yaml_fragment(recs, common::redact_password(options.metrics_url));
      if (!out) {
        std::cerr << "sluice plan: --write: cannot write " << options.write << "\n";
        return 1;
      }
    }
    return 0;
  } catch (const aws::AwsError& e) {
    std::cerr << "\nsluice plan: --metrics-url " << common::redact_password(options.metrics_url)
              << ": " << common::redact_secret(e.what(), options.metrics_url) << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "\nsluice plan: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace sluice::app
