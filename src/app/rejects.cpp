#include "app/rejects.hpp"

#include <simdjson.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <map>

#include "app/config.hpp"
#include "app/run.hpp"

namespace sluice::app {
namespace {

constexpr std::size_t kPage = 500;

const PipelineConfig& chosen(const std::vector<PipelineConfig>& configs, const std::string& name) {
  std::string listed;
  for (const auto& c : configs) listed += (listed.empty() ? "" : ", ") + c.name;
  if (name.empty()) {
    if (configs.size() > 1)
      throw ConfigError("the file has several pipelines (" + listed +
                        "): choose one with --pipeline");
    return configs.front();
  }
  for (const auto& c : configs)
    if (c.name == name) return c;
  throw ConfigError("--pipeline " + name + ": no such pipeline in the file (" + listed + ")");
}

// Every row the options select, page by page (the rows are read `kPage` at a time, so
// a table of millions is never in memory at once). `visit` returns false to stop.
template <class Visit>
void each_page(sinks::Sink& sink, const RejectsOptions& o, bool replayed, Visit visit) {
  sinks::RejectQuery query;
  query.reason = o.reason;
  query.replayed = replayed;
  std::size_t seen = 0;
  for (;;) {
    query.limit = o.limit ? std::min(kPage, o.limit - seen) : kPage;
    if (query.limit == 0) return;
    auto rows = sink.read_rejects(query);
    if (rows.empty()) return;
    seen += rows.size();
    query.after_id = rows.back().id;
    if (!visit(rows)) return;
  }
}

std::string one_line(std::string text, std::size_t max) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  return text.size() > max ? text.substr(0, max - 3) + "..." : text;
}

int list(sinks::Sink& sink, RejectsOptions o) {
  if (o.limit == 0) o.limit = 100;
  std::size_t n = 0;
  std::cout << "id\trejected_at\treason\tmessage_id\tdetail" << (o.all ? "\treplayed_at" : "")
            << "\n";
  each_page(sink, o, o.all, [&](const std::vector<sinks::StoredReject>& rows) {
    for (const auto& r : rows) {
      std::cout << r.id << "\t" << r.rejected_at << "\t" << r.row.reason << "\t" << r.row.message_id
                << "\t" << one_line(r.row.detail, 160);
      if (o.all) std::cout << "\t" << (r.replayed_at.empty() ? "-" : r.replayed_at);
      std::cout << "\n";
    }
    n += rows.size();
    return true;
  });
  std::cerr << "sluice rejects: " << n << " row(s)" << (o.limit == n ? " (--limit)" : "") << "\n";
  return 0;
}

// Each body as one line: JSON minified (a body may span lines); a body that is no
// JSON (a malformed one) cannot be a JSON line and is left out, counted.
int export_rows(sinks::Sink& sink, const RejectsOptions& o) {
  std::ofstream file;
  if (o.out != "-") {
    file.open(o.out, std::ios::trunc);
    if (!file) {
      std::cerr << "sluice rejects export: --out " << o.out << ": cannot write it\n";
      return 2;
    }
  }
  std::ostream& out = o.out == "-" ? std::cout : file;
  simdjson::dom::parser parser;
  std::size_t written = 0, not_json = 0;
  each_page(sink, o, o.all, [&](const std::vector<sinks::StoredReject>& rows) {
    for (const auto& r : rows) {
      simdjson::dom::element doc;
      if (parser.parse(r.row.body).get(doc)) {
        ++not_json;
        continue;
      }
      out << simdjson::minify(doc) << "\n";
      ++written;
    }
    if (written && written % 10000 < rows.size()) std::cerr << "exported " << written << "\n";
    return true;
  });
  out.flush();
  if (!out) {
    std::cerr << "sluice rejects export: --out " << o.out << ": the write failed\n";
    return 1;
  }
  std::cerr << "sluice rejects export: " << written << " line(s)"
            << (o.out == "-" ? "" : " to " + o.out);
  if (not_json) std::cerr << "; " << not_json << " body(ies) that are not JSON left out";
  std::cerr << "\n";
  return 0;
}

int replay(sinks::Sink& sink, const PipelineConfig& config, const RejectsOptions& o) {
  const pipeline::Transformer transformer(config.transform);
  std::size_t stored = 0, duplicates = 0, filtered = 0, failed = 0, rows_seen = 0;
  std::map<std::string, std::size_t> still;  // reason -> rows still rejected
  std::string example;                       // one still-rejected row's reason, in full
  each_page(sink, o, false, [&](const std::vector<sinks::StoredReject>& rows) {
    std::vector<pipeline::Record> records;
    std::vector<std::string> record_ids, done;
    for (const auto& r : rows) {
      pipeline::MessageView view;
      view.body = r.row.body;
      view.message_id = r.row.message_id;
      view.receive_count = 1;
      view.received_time = std::chrono::system_clock::now();
      auto outcome = transformer.transform(view);
      if (auto* record = std::get_if<pipeline::Record>(&outcome)) {
        records.push_back(std::move(*record));
        record_ids.push_back(r.id);
      } else if (std::holds_alternative<pipeline::Filtered>(outcome)) {
        ++filtered;
        done.push_back(r.id);
      } else {
        const auto& rejection = std::get<pipeline::Rejection>(outcome);
        ++still[pipeline::to_string(rejection.reason)];
        if (example.empty()) example = "row " + r.id + ": " + rejection.detail;
      }
    }
    if (!o.dry_run && !records.empty()) {
      const auto result = sink.write(records);
      for (std::size_t i = 0; i < records.size(); ++i) {
        switch (result.outcomes[i]) {
          case sinks::WriteOutcome::inserted:
            ++stored;
            done.push_back(record_ids[i]);
            break;
          case sinks::WriteOutcome::duplicate:
            ++duplicates;
            done.push_back(record_ids[i]);
            break;
          default:
            ++failed;
        }
      }
    } else {
      stored += records.size();
    }
    // Marked after the write: a replay stopped in between writes them again, as
    // duplicates.
    if (!o.dry_run && !done.empty()) sink.mark_replayed(done);
    rows_seen += rows.size();
    if (rows_seen % 10000 < rows.size()) std::cerr << "replayed " << rows_seen << " row(s)\n";
    return true;
  });
  std::size_t rejected = 0;
  std::string reasons;
  for (const auto& [reason, n] : still) {
    rejected += n;
    reasons += (reasons.empty() ? "" : ", ") + reason + " " + std::to_string(n);
  }
  std::cout << "sluice rejects replay" << (o.dry_run ? " (dry run: nothing written)" : "") << ": "
            << rows_seen << " row(s) of " << config.name << "\n"
            << "  " << (o.dry_run ? "would be stored " : "stored ") << stored
            << (o.dry_run ? "" : ", duplicates " + std::to_string(duplicates)) << ", filtered "
            << filtered << (failed ? ", not written (the database) " + std::to_string(failed) : "")
            << "\n"
            << "  still rejected " << rejected << (reasons.empty() ? "" : " (" + reasons + ")")
            << (rejected ? ", left for another replay" : "") << "\n";
  if (!example.empty()) std::cout << "  e.g. " << one_line(example, 300) << "\n";
  return failed ? 1 : 0;
}

}  // namespace

int run_rejects(const RejectsOptions& o) {
  std::unique_ptr<sinks::Sink> sink;
  const PipelineConfig* config = nullptr;
  std::vector<PipelineConfig> configs;
  try {
    configs = load_pipelines(o.config_path);
    config = &chosen(configs, o.pipeline);
    if (!config->writer.rejects_table)
      throw ConfigError("dead_letter.table is false for pipeline " + config->name +
                        ": its rejects are in no table (the dead-letter queue's are: sluice "
                        "dlq peek)");
  } catch (const ConfigError& e) {
    std::cerr << "sluice rejects: " << e.what() << "\n";
    return 2;
  }
  try {
    sink = sink_factory(*config)();
    sink->open();
    if (o.action == "list") return list(*sink, o);
    if (o.action == "export") return export_rows(*sink, o);
    return replay(*sink, *config, o);
  } catch (const sinks::SinkError& e) {
    std::cerr << "sluice rejects " << o.action << ": " << e.what() << "\n";
    return 1;
  }
}

}  // namespace sluice::app
