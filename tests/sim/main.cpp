// sluice_sim: sweeps seeds of the deterministic simulation (tests/sim/README.md).
//   sluice_sim [--seeds N] [--first S]      seeds S .. S+N-1 (default 10,000 from 1)
//   sluice_sim --seed S [--log FILE]        one seed; its event log to FILE
//   sluice_sim --broken NAME [--seeds N]    with a deliberately broken core: succeeds
//                                           only if some seed catches it
// A failing seed prints the invariant it broke and the command that replays it.
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>

#include "runtime/fault_switch.hpp"
#include "sim/simulation.hpp"

namespace {
using sluice::runtime::faults::Switch;

// One seed; an exception escaping the simulation is its failure, reported like the others.
sluice::sim::Outcome run_guarded(std::uint64_t seed, const sluice::sim::Options& options) {
  try {
    return sluice::sim::run_seed(seed, options);
  } catch (const std::exception& e) {
    sluice::sim::Outcome outcome;
    outcome.ok = false;
    outcome.failure = std::string("an exception escaped the simulation: ") + e.what();
    return outcome;
  } catch (...) {
    sluice::sim::Outcome outcome;
    outcome.ok = false;
    outcome.failure = "an exception escaped the simulation";
    return outcome;
  }
}

int usage(const std::string& why) {
  std::cerr << "sluice_sim: " << why
            << "\nusage: sluice_sim [--seeds N] [--first S] | --seed S [--log FILE] | "
               "--broken ack_before_commit|permit_released_twice|group_out_of_order|"
               "position_ahead_of_rows\n";
  return 2;
}

bool parse_count(const char* text, std::uint64_t& out) {
  char* end = nullptr;
  errno = 0;
  if (*text < '0' || *text > '9') return false;  // no sign, no space: strtoull takes both
  const unsigned long long v = std::strtoull(text, &end, 10);
  if (errno || end == text || *end) return false;
  out = v;
  return true;
}
}  // namespace

int main(int argc, char** argv) {
  std::uint64_t seeds = 10000, first = 1, seed = 0;
  bool one = false, sweep_flag = false;
  std::string log_file, broken;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    if (arg == "--seeds" || arg == "--first" || arg == "--seed") {
      v = value();
      std::uint64_t n = 0;
      if (!v || !parse_count(v, n))
        return usage(arg + " expects a whole number, got " + (v ? v : "nothing"));
      if (arg == "--seeds") {
        seeds = n;
        sweep_flag = true;
      } else if (arg == "--first") {
        first = n;
        sweep_flag = true;
      } else {
        seed = n;
        one = true;
      }
    } else if (arg == "--log") {
      v = value();
      if (!v) return usage("--log expects a file name");
      log_file = v;
    } else if (arg == "--broken") {
      v = value();
      if (!v) return usage("--broken expects a name");
      broken = v;
    } else {
      return usage("unknown argument " + arg);
    }
  }
  if (one && sweep_flag) return usage("--seed runs one seed: not with --seeds or --first");
  if (seeds == 0) return usage("--seeds expects at least 1");
  if (first + seeds < first) return usage("--first + --seeds passes the last seed (2^64 - 1)");
  if (!log_file.empty() && !one) return usage("--log needs --seed (one seed's log)");
  // The core's own logs only when asked (SLUICE_SIM_LOGS=1): the event log says it.
  if (!std::getenv("SLUICE_SIM_LOGS")) spdlog::set_level(spdlog::level::off);
  if (!broken.empty()) {
    if (broken == "ack_before_commit")
      sluice::runtime::faults::active = Switch::ack_before_commit;
    else if (broken == "permit_released_twice")
      sluice::runtime::faults::active = Switch::permit_released_twice;
    else if (broken == "group_out_of_order")
      sluice::runtime::faults::active = Switch::group_out_of_order;
    else if (broken == "position_ahead_of_rows")
      sluice::runtime::faults::active = Switch::position_ahead_of_rows;
    else
      return usage("--broken " + broken + ": no such broken core");
  }
  const std::string replay = std::string(argv[0]) + (broken.empty() ? "" : " --broken " + broken);

  if (one) {
    sluice::sim::Options options;
    options.keep_log = true;
    const auto outcome = run_guarded(seed, options);
    if (!log_file.empty()) {
      std::ofstream out(log_file);
      for (const auto& line : outcome.log) out << line << '\n';
    } else {
      for (const auto& line : outcome.log) std::cout << line << '\n';
    }
    std::cout << "sim: seed " << seed << (outcome.ok ? " passed" : " FAILED: " + outcome.failure)
              << "\n  " << outcome.summary << "\n  log hash " << std::hex << outcome.log_hash
              << std::dec << '\n';
    return outcome.ok ? 0 : 1;
  }

  const auto started = std::chrono::steady_clock::now();
  std::map<sluice::sim::Fault, std::uint64_t> drawn;
  std::uint64_t passed = 0;
  for (std::uint64_t s = first; s < first + seeds; ++s) {
    const auto outcome = run_guarded(s, {});
    for (const auto& [fault, n] : outcome.faults) drawn[fault] += n;
    if (!outcome.ok) {
      std::cout << "sim: seed " << s << " FAILED: " << outcome.failure << "\n  " << outcome.summary
                << "\n  replay: " << replay << " --seed " << s << " --log sim-" << s << ".log\n";
      if (!broken.empty()) {
        // Caught only if the same seed passes on the real core: the failure is the
        // broken core's, not the simulation's own.
        const auto active = sluice::runtime::faults::active.load();
        sluice::runtime::faults::active = Switch::none;
        const auto again = run_guarded(s, {});
        sluice::runtime::faults::active = active;
        if (!again.ok) {
          std::cout << "sim: seed " << s << " fails on the real core too: " << again.failure << "\n"
                    << passed << " passed, 1 failed\n";
          return 1;
        }
        std::cout << "sim: broken core " << broken << " caught by seed " << s << " after " << passed
                  << " passing seeds (the real core passes it)\n";
        return 0;
      }
      std::cout << passed << " passed, 1 failed\n";
      return 1;
    }
    ++passed;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (!broken.empty()) {
    std::cout << "sim: broken core " << broken << " NOT caught in " << seeds << " seeds\n";
    return 1;
  }
  std::cout << "sim: seeds " << first << ".." << first + seeds - 1 << " in " << seconds
            << " s; faults drawn:";
  bool none_missing = true;
  for (int f = 0; f < static_cast<int>(sluice::sim::Fault::count_); ++f) {
    const auto fault = static_cast<sluice::sim::Fault>(f);
    std::cout << ' ' << sluice::sim::to_string(fault) << '=' << drawn[fault];
    none_missing = none_missing && drawn[fault] > 0;
  }
  std::cout << '\n';
  // A sweep of any size draws every fault kind: one never drawn is a simulation that
  // stopped testing it.
  if (seeds >= 1000 && !none_missing) {
    std::cout << "sim: a fault kind was never drawn\n" << passed << " passed, 1 failed\n";
    return 1;
  }
  std::cout << passed << " passed, 0 failed\n";
  return 0;
}
