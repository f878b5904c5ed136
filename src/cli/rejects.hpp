#pragma once
// `sluice rejects list|export|replay`: the rejects table of a pipeline's sink, read
// through the pipeline's own configuration file.
//  - list: the rows, oldest first, with their reason and detail;
//  - export: each row's body as one JSON line (what the file source reads), to replay
//    them later through `source.type: file`;
//  - replay: each row not yet replayed through the pipeline's current normalization,
//    identity, filter and route (after a fix), into its sink; a row stored (or found a
//    duplicate) or filtered is marked replayed, one still rejected is left as it is.
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace sluice::app {

struct RejectsOptions {
  std::string action;  // list | export | replay
  std::string config_path;
  std::string pipeline;              // its name, when the file has several
  std::string reason;                // only the rows of this reason
  bool all = false;                  // list and export: also the rows already replayed
  std::optional<std::size_t> limit;  // at most this many rows (0: every one); list: 100
  std::string out = "-";             // export: the file to write ("-": standard output)
  bool dry_run = false;              // replay: say what would happen, write and mark nothing
};

// The reasons a rejects row can have (--reason).
int run_rejects(const RejectsOptions& options);

}  // namespace sluice::app
