#pragma once
// The rows file of the bare clients' database ceilings (bench/pg_rows.hpp): each body's
// record, worked out with Sluice's own transform from the pipeline's configuration,
// keyed by the body's MD5: "md5 <TAB> hash <TAB> document" lines. Throws for a body the
// pipeline would reject (a benchmark's events are all good).
#include <chrono>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include "common/crypto.hpp"
#include "config/config.hpp"
#include "pipeline/transform.hpp"

namespace sluice::bench {

inline void write_rows_file(const std::string& pipeline_yaml,
                            const std::vector<std::string>& bodies, const std::string& path) {
  const pipeline::Transformer transformer(app::parse_config(pipeline_yaml).transform);
  std::ofstream out(path);
  for (const auto& body : bodies) {
    pipeline::MessageView view;
    view.body = body;
    view.message_id = "m";
    view.received_time = std::chrono::system_clock::now();
    const auto result = transformer.transform(view);
    const auto* record = std::get_if<pipeline::Record>(&result);
    if (!record) throw std::runtime_error("an event the pipeline rejects: " + body);
    out << crypto::md5_hex(body) << '\t' << record->hash << '\t' << record->document.dump() << '\n';
  }
}

// Removes the file when it goes out of scope (also when a contender cannot start).
struct RemoveOnExit {
  std::string path;
  ~RemoveOnExit() { std::remove(path.c_str()); }
};

}  // namespace sluice::bench
