#include "cli/rejects.hpp"

#include <simdjson.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "app/run.hpp"
#include "config/config.hpp"
#include "ingest/message_properties.hpp"

namespace sluice::app {
namespace {

using Json = nlohmann::json;

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

// Where a pipeline's rejects rows are: its database and table.
std::string rejects_place(const PipelineConfig& c) {
  return c.sink_type + " " + c.sink_driver->rejects_place(*c.sink);
}

// What a pipeline reads besides the body and the message id: a row written before
// the rows kept their properties cannot be replayed through it as it came.
bool reads_properties(const PipelineConfig& c) {
  using pipeline::MetaField;
  const auto& spec = c.transform;
  if (spec.key != pipeline::TransformSpec::Key::content) return true;
  for (const auto& pattern : spec.filter)
    if (pattern.is_object() && !spec.filter_headers.empty() &&
        pattern.contains(spec.filter_headers))
      return true;
  for (const auto& [where, fields] : pipeline::field_lists(spec))
    for (const auto& f : fields) {
      if (f.header) return true;
      if (f.meta && *f.meta != MetaField::message_id && *f.meta != MetaField::source &&
          !pipeline::sns_envelope_key(*f.meta))
        return true;
    }
  return false;
}

// The rows of a rejects table that are one pipeline's: all of them, or only those it
// wrote where pipelines share the table.
struct Rejects {
  sinks::Sink& sink;
  std::string pipeline;  // empty: every row
};

// Every row the options select, page by page (the rows are read `kPage` at a time, so
// a table of millions is never in memory at once).
template <class Visit>
void each_page(const Rejects& rejects, const RejectsOptions& o, std::size_t limit, bool replayed,
               Visit visit) {
  sinks::Sink& sink = rejects.sink;
  sinks::RejectQuery query;
  query.pipeline = rejects.pipeline;
  query.reason = o.reason;
  query.replayed = replayed;
  std::size_t seen = 0;
  for (;;) {
    query.limit = limit ? std::min(kPage, limit - seen) : kPage;
    if (query.limit == 0) return;
    auto rows = sink.read_rejects(query);
    if (rows.empty()) return;
    seen += rows.size();
    query.after_id = rows.back().id;
    visit(rows);
  }
}

std::string one_line(std::string text, std::size_t max) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  return text.size() > max ? text.substr(0, max - 3) + "..." : text;
}

int list(const Rejects& sink, const RejectsOptions& o) {
  const std::size_t limit = o.limit.value_or(100);
  std::size_t n = 0;
  std::cout << "id\trejected_at\treason\tmessage_id\tdetail" << (o.all ? "\treplayed_at" : "")
            << "\n";
  each_page(sink, o, limit, o.all, [&](const std::vector<sinks::StoredReject>& rows) {
    for (const auto& r : rows) {
      std::cout << r.id << "\t" << r.rejected_at << "\t" << r.row.reason << "\t" << r.row.message_id
                << "\t" << one_line(r.row.detail, 160);
      if (o.all) std::cout << "\t" << (r.replayed_at.empty() ? "-" : r.replayed_at);
      std::cout << "\n";
    }
    n += rows.size();
  });
  std::cerr << "sluice rejects: " << n << " row(s)"
            << (limit && n == limit ? " (the --limit; more may follow)" : "") << "\n";
  return 0;
}

// Each body as one line, its text kept (numbers exactly as written): a line break in
// valid JSON lies between tokens, where a space means the same. A body that is no
// JSON (a malformed one) cannot be a JSON line and is left out, counted.
int export_rows(const Rejects& sink, const RejectsOptions& o) {
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
  std::size_t written = 0, not_json = 0, reported = 0;
  each_page(sink, o, o.limit.value_or(0), o.all, [&](const std::vector<sinks::StoredReject>& rows) {
    for (const auto& r : rows) {
      simdjson::dom::element doc;
      if (parser.parse(r.row.body).get(doc)) {
        ++not_json;
        continue;
      }
      std::string line = r.row.body;
      std::replace_if(
          line.begin(), line.end(), [](char c) { return c == '\n' || c == '\r'; }, ' ');
      out << line << "\n";
      ++written;
    }
    if (written >= reported + 10000) {
      reported = written;
      std::cerr << "exported " << written << "\n";
    }
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

struct ReplayCounts {
  std::size_t rows = 0, stored = 0, duplicates = 0, filtered = 0, refused = 0, failed = 0,
              without_properties = 0;
  std::map<std::string, std::size_t> still;  // reason -> rows still rejected
  std::string example;                       // one still-failing row's reason, in full
};

// Writes `records`; a batch the database refuses as a whole is written record by record,
// so that one refused record leaves only itself behind. Returns the outcomes.
std::vector<sinks::WriteOutcome> write_each(sinks::Sink& sink,
                                            const std::vector<pipeline::Record>& records,
                                            std::vector<std::string>& refusals) {
  try {
    return sink.write(records).outcomes;
  } catch (const sinks::SinkError& e) {
    if (e.kind() != sinks::SinkFailure::refused) throw;
  }
  std::vector<sinks::WriteOutcome> outcomes;
  for (const auto& record : records) {
    try {
      outcomes.push_back(sink.write(std::span(&record, 1)).outcomes.front());
    } catch (const sinks::SinkError& e) {
      if (e.kind() != sinks::SinkFailure::refused) throw;
      outcomes.push_back(sinks::WriteOutcome::refused);
      refusals.push_back(e.what());
    }
  }
  return outcomes;
}

int replay(const Rejects& rejects, const PipelineConfig& config, const RejectsOptions& o) {
  sinks::Sink& sink = rejects.sink;
  const pipeline::Transformer transformer(config.transform);
  const bool needs_properties = reads_properties(config);
  ReplayCounts n;
  each_page(rejects, o, o.limit.value_or(0), false,
            [&](const std::vector<sinks::StoredReject>& rows) {
              std::vector<pipeline::Record> records;
              std::vector<std::string> record_ids, done;
              for (const auto& r : rows) {
                ingest::ReplayedMessage message;
                if (!ingest::replayed_message(r, message) && needs_properties) {
                  ++n.without_properties;
                  continue;
                }
                auto outcome = transformer.transform(message.view);
                if (auto* record = std::get_if<pipeline::Record>(&outcome)) {
                  records.push_back(std::move(*record));
                  record_ids.push_back(r.id);
                } else if (std::holds_alternative<pipeline::Filtered>(outcome)) {
                  ++n.filtered;
                  done.push_back(r.id);
                } else {
                  const auto& rejection = std::get<pipeline::Rejection>(outcome);
                  ++n.still[pipeline::to_string(rejection.reason)];
                  if (n.example.empty()) n.example = "row " + r.id + ": " + rejection.detail;
                }
              }
              if (o.dry_run) {
                n.stored += records.size();
              } else if (!records.empty()) {
                std::vector<std::string> refusals;
                const auto outcomes = write_each(sink, records, refusals);
                for (std::size_t i = 0; i < records.size(); ++i) {
                  switch (outcomes[i]) {
                    case sinks::WriteOutcome::inserted:
                      ++n.stored;
                      done.push_back(record_ids[i]);
                      break;
                    case sinks::WriteOutcome::duplicate:
                      ++n.duplicates;
                      done.push_back(record_ids[i]);
                      break;
                    case sinks::WriteOutcome::refused:
                      ++n.refused;
                      break;
                    default:
                      ++n.failed;
                  }
                }
                if (!refusals.empty() && n.example.empty())
                  n.example = "refused by the database: " + refusals.front();
              }
              // Marked after the write: a replay stopped in between writes them again, as
              // duplicates.
              if (!o.dry_run && !done.empty()) sink.mark_replayed(done);
              const std::size_t before = n.rows;
              n.rows += rows.size();
              if (n.rows / 10000 != before / 10000)
                std::cerr << "replayed " << n.rows << " row(s)\n";
            });
  std::size_t rejected = 0;
  std::string reasons;
  for (const auto& [reason, count] : n.still) {
    rejected += count;
    reasons += (reasons.empty() ? "" : ", ") + reason + " " + std::to_string(count);
  }
  std::cout << "sluice rejects replay" << (o.dry_run ? " (dry run: nothing written)" : "") << ": "
            << n.rows << " row(s) of " << config.name << "\n";
  if (o.dry_run)
    std::cout << "  would be written " << n.stored << " (new or duplicate), filtered " << n.filtered
              << "\n";
  else
    std::cout << "  stored " << n.stored << ", duplicates " << n.duplicates << ", filtered "
              << n.filtered << "\n";
  std::cout << "  still rejected " << rejected << (reasons.empty() ? "" : " (" + reasons + ")");
  if (n.refused) std::cout << ", refused by the database " << n.refused;
  if (n.failed) std::cout << ", not written (the database failed) " << n.failed;
  if (rejected + n.refused + n.failed) std::cout << ": left for another replay";
  std::cout << "\n";
  if (n.without_properties)
    std::cout << "  left as they are " << n.without_properties
              << " (rows of an earlier release keep no message properties, which this "
                 "pipeline reads: replay them from the dead-letter queue or an export)\n";
  if (!n.example.empty()) std::cout << "  e.g. " << one_line(n.example, 300) << "\n";
  return n.failed ? 1 : 0;
}

}  // namespace

int run_rejects(const RejectsOptions& o) {
  const PipelineConfig* config = nullptr;
  std::vector<PipelineConfig> configs;
  try {
    configs = load_pipelines(o.config_path);
    config = &chosen(configs, o.pipeline);
    if (!config->writer.rejects_table)
      throw ConfigError("dead_letter.table is false for pipeline " + config->name +
                        ": its rejects are in no table (the dead-letter queue's are: sluice "
                        "dlq peek)");
    if (const auto missing = config->sink_driver->missing_database(*config->sink); !missing.empty())
      throw ConfigError(missing);
  } catch (const ConfigError& e) {
    std::cerr << "sluice rejects " << o.action << ": " << e.what() << "\n";
    return 2;
  }
  // A table the file's pipelines share holds rows of each: the chosen pipeline's are
  // those its rows name (rows of a release before the pipeline column name none: they
  // are read only where the table is one pipeline's).
  bool shared = false;
  for (const auto& other : configs)
    shared = shared || (&other != config && rejects_place(other) == rejects_place(*config));
  try {
    auto sink = sink_factory(*config)();
    sink->open();
    const Rejects rejects{*sink, shared ? config->name : std::string()};
    if (o.action == "list") return list(rejects, o);
    if (o.action == "export") return export_rows(rejects, o);
    return replay(rejects, *config, o);
  } catch (const std::exception& e) {
    std::cerr << "sluice rejects " << o.action << ": " << e.what() << "\n";
    return 1;
  }
}

}  // namespace sluice::app
