#include "cli/plan.hpp"

#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "common/redact.hpp"
#include "config/config.hpp"
#include "observe/http_get.hpp"
#include "observe/metrics.hpp"

namespace sluice::app {

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
                        {"auto_concurrency", m.auto_receives},
                        {"sink_writers", m.sink_writers},
                        {"sink_batch_size", m.sink_batch_size},
                        {"visibility_timeout_s", m.visibility_timeout_s}}
      .dump();
}

std::string yaml_fragment(const std::vector<Recommendation>& recs, const std::string& origin) {
  std::ostringstream out;
  out << "# sluice plan, from " << origin << "\n";
  for (const std::string section : {"source", "sink"}) {
    out << section << ":\n";
    // Its own keys first, then those of its subsections (source.sqs.*), nested.
    std::vector<std::string> subsections;
    for (const auto& r : recs) {
      if (!r.key.starts_with(section + ".")) continue;
      const std::string rest = r.key.substr(section.size() + 1);
      if (const auto dot = rest.find('.'); dot != std::string::npos) {
        if (std::find(subsections.begin(), subsections.end(), rest.substr(0, dot)) ==
            subsections.end())
          subsections.push_back(rest.substr(0, dot));
        continue;
      }
      out << "  " << rest << ": " << r.value << "  # " << r.formula << "\n";
    }
    for (const auto& subsection : subsections) {
      out << "  " << subsection << ":\n";
      const std::string prefix = section + "." + subsection + ".";
      for (const auto& r : recs)
        if (r.key.starts_with(prefix))
          out << "    " << r.key.substr(prefix.size()) << ": " << r.value << "  # " << r.formula
              << "\n";
    }
  }
  return out.str();
}

}  // namespace

int run_plan(const PlanOptions& options) {
  using std::chrono::milliseconds;
  milliseconds duration, interval, window, headroom;
  observe::LocalUrl url;
  try {
    duration =
        duration_flag("--duration", options.duration, milliseconds(1000), std::chrono::hours(1));
    interval = duration_flag("--interval", options.interval, milliseconds(100), duration);
    // The default window never asks for more than the observation.
    window = options.window == "5s" && duration < milliseconds(5000)
                 ? duration
                 : duration_flag("--window", options.window, interval, duration);
    headroom =
        duration_flag("--headroom", options.headroom, milliseconds(0), std::chrono::hours(1));
    try {
      url = observe::parse_local_url(options.metrics_url);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(std::string("--metrics-url: ") + e.what() +
                                  ", expected http://host:port/metrics");
    }
  } catch (const std::invalid_argument& e) {
    std::cerr << "sluice plan: " << e.what() << "\n";
    return 2;
  }
  std::vector<Scrape> scrapes;
  const auto start = std::chrono::steady_clock::now();
  try {
    for (int k = 0;; ++k) {
      const auto at = start + interval * k;
      if (at - start > duration) break;
      std::this_thread::sleep_until(at);
      observe::LocalResponse response;
      try {
        response = observe::http_request(url);
      } catch (const std::exception& e) {
        std::cerr << "\nsluice plan: --metrics-url " << common::redact_password(options.metrics_url)
                  << ": " << e.what() << "\n";
        return 1;
      }
      if (response.status != 200)
        throw std::runtime_error("--metrics-url answered " + std::to_string(response.status));
      auto scrape = parse_exposition(
          response.body,
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      try {
        scrapes.push_back(one_pipeline(std::move(scrape), options.pipeline));
      } catch (const std::invalid_argument& e) {  // the choice of pipeline: bad usage
        std::cerr << "sluice plan: " << e.what() << "\n";
        return 2;
      }
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
  } catch (const std::exception& e) {
    std::cerr << "\nsluice plan: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace sluice::app
