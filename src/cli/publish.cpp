#include "cli/publish.hpp"

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <tuple>

namespace sluice::app {

GeneratedEvents generate_events(int count, double duplicate_share, double malformed_share,
                                unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> unit(0, 1);
  GeneratedEvents out;
  std::vector<nlohmann::json> originals;
  std::set<std::tuple<std::string, std::string, std::string, long>> distinct;
  static const char* kTypes[] = {"RECEIVED", "MOVED", "ADJUSTED", "SHIPPED", "COUNTED"};
  for (int i = 0; i < count; ++i) {
    const double r = unit(rng);
    if (r < malformed_share) {
      // Broken on purpose, one of three ways: not JSON, a missing field, a wrong type.
      const int kind = i % 3;
      out.bodies.push_back(
          kind == 0 ? R"({"eventId": "e-)" + std::to_string(i) + R"(", "skuId": )"
          : kind == 1
              ? R"({"eventId":"e-)" + std::to_string(i) +
                    R"(","locationId":"L-1","eventType":"MOVED","quantity":1})"
              : R"({"eventId":"e-)" + std::to_string(i) +
                    R"(","skuId":"SKU-1","locationId":"L-1","eventType":"MOVED","quantity":"many"})");
      ++out.malformed;
      continue;
    }
    nlohmann::json event;
    if (!originals.empty() && r < malformed_share + duplicate_share) {
      // The same business record from another upstream: not byte-identical (new event
      // id and timestamp, numbers as strings, extra metadata), same business fields.
      const auto& original = originals[rng() % originals.size()];
      event = {{"source", "upstream-b"},
               {"quantity", std::to_string(original["quantity"].get<long>())},
               {"eventType", original["eventType"]},
               {"skuId", original["skuId"]},
               {"locationId", original["locationId"]},
               {"eventId", "dup-" + std::to_string(i)},
               {"emittedAt", 1700000000000 + i}};
    } else {
      event = {{"eventId", "e-" + std::to_string(i)},
               {"skuId", "SKU-" + std::to_string(rng() % 5000)},
               {"locationId", "LOC-" + std::to_string(rng() % 40)},
               {"eventType", kTypes[rng() % 5]},
               {"quantity", static_cast<long>(rng() % 100)},
               {"emittedAt", 1700000000000 + i},
               {"source", "upstream-a"}};
      originals.push_back(event);
    }
    long quantity = event["quantity"].is_string() ? std::stol(event["quantity"].get<std::string>())
                                                  : event["quantity"].get<long>();
    distinct.emplace(event["skuId"], event["locationId"], event["eventType"], quantity);
    out.bodies.push_back(event.dump());
  }
  out.distinct_records = distinct.size();
  return out;
}

std::size_t pad_events(std::vector<std::string>& bodies, double share, std::size_t bytes,
                       unsigned seed) {
  std::mt19937 rng(seed ^ 0x5eed);
  std::uniform_real_distribution<double> unit(0, 1);
  std::size_t padded = 0;
  for (auto& body : bodies) {
    if (unit(rng) >= share) continue;
    auto doc = nlohmann::json::parse(body, nullptr, false);
    if (!doc.is_object() || body.size() + 16 >= bytes) continue;
    doc["padding"] = "";
    const std::size_t base = doc.dump().size();
    doc["padding"] = std::string(bytes > base ? bytes - base : 0, 'x');
    body = doc.dump();
    ++padded;
  }
  return padded;
}

namespace {

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) lines.push_back(line);
  return lines;
}

}  // namespace

int run_publish(const PublishOptions& options, const std::vector<driver::SourceVerbs>& sources) {
  const driver::SourceVerbs::Publish* chosen = nullptr;
  std::string choices;
  for (const auto& source : sources) {
    if (!source.publish) continue;
    choices += (choices.empty() ? "" : ", or ") + source.publish->choose_with;
    if (!chosen && source.publish->chosen()) chosen = &*source.publish;
  }
  if (!chosen) {
    std::cerr << "sluice publish: give " << choices << "\n";
    return 2;
  }
  if (auto problem = chosen->check()) {
    std::cerr << "sluice publish: " << *problem << "\n";
    return 2;
  }
  driver::PublishRequest request;
  for (const auto& header : options.headers) {
    const auto eq = header.find('=');
    request.headers[header.substr(0, eq)] = header.substr(eq + 1);
  }
  // The caller's trace (a script run inside a traced job): the flag, else the
  // environment variables OpenTelemetry names for carrying a context to a process.
  {
    const char* env = std::getenv("TRACEPARENT");
    const std::string traceparent = !options.traceparent.empty() ? options.traceparent
                                    : env                        ? env
                                                                 : "";
    if (!traceparent.empty()) {
      const char* state = std::getenv("TRACESTATE");
      request.trace = tracing::parse_traceparent(traceparent, state ? state : "");
      if (!request.trace) {
        std::cerr << "sluice publish: "
                  << (options.traceparent.empty() ? "TRACEPARENT" : "--traceparent") << ": got '"
                  << traceparent
                  << "', expected a W3C traceparent: 00-<32 hex trace id>-<16 hex span id>-<2 hex "
                     "flags>, lowercase, ids not all zeros\n";
        return 2;
      }
      // A tracestate that breaks W3C's rules would be dropped on the way: said instead.
      if (state && *state && request.trace->trace_state.empty()) {
        std::cerr << "sluice publish: TRACESTATE: got '" << state
                  << "', expected a W3C tracestate: comma-separated key=value members (at most "
                     "32, 512 characters in all)\n";
        return 2;
      }
    }
  }
  request.concurrency = options.concurrency;
  request.progress = options.progress;
  try {
    if (!options.file.empty()) {
      request.bodies = read_lines(options.file);
    } else {
      auto generated = options.events == "orders"
                           ? generate_order_events(options.generate, options.duplicate_share,
                                                   options.malformed_share, options.seed)
                           : generate_events(options.generate, options.duplicate_share,
                                             options.malformed_share, options.seed);
      std::cerr << "sluice publish: generated " << generated.bodies.size()
                << " events: " << generated.distinct_records << " distinct business records, "
                << generated.malformed << " malformed on purpose\n";
      request.bodies = std::move(generated.bodies);
    }
    if (options.large_share > 0) {
      const std::size_t padded =
          pad_events(request.bodies, options.large_share, options.large_bytes, options.seed);
      std::cerr << "sluice publish: " << padded << " events padded to " << options.large_bytes
                << " bytes\n";
    }
  } catch (const std::exception& e) {
    std::cerr << "sluice publish: " << e.what() << "\n";
    return 2;
  }
  return chosen->run(std::move(request));
}

}  // namespace sluice::app
