// The file source (source.type: file), end to end through `sluice run` into SQLite and
// PostgreSQL: JSON lines with business duplicates, kill -9 twice mid-run, a malformed
// line, a last line still being written, standard input. The third source, built as a
// driver only: nothing in src/app names it.
#include "file/file_source.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <thread>

#include "app/run.hpp"
#include "cli/publish.hpp"
#include "config/config.hpp"
#include "sluice/driver/sink.hpp"
#include "support/emulator.hpp"
#include "support/local_sqs.hpp"
#include "support/pipeline.hpp"
#include "support/postgres_number.hpp"
#include "support/process.hpp"
#include "support/wait.hpp"
#include "support/work.hpp"

using namespace sluice;
using namespace std::chrono_literals;

namespace {

// A scratch folder of its own, removed at the end.
struct Scratch {
  explicit Scratch(const std::string& name)
      : dir(::testing::TempDir() + "/sluice-file-" + name + "-" + std::to_string(getpid())) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  ~Scratch() { std::filesystem::remove_all(dir); }
  std::string path(const std::string& name) const { return dir + "/" + name; }
  std::string dir;
};

std::string file_yaml(const std::string& path, const std::string& sink_section,
                      const std::string& extra = "") {
  return "source:\n  type: file\n  max_in_flight: 100\n  failure_backoff: 200ms\n  file:\n"
         "    path: " +
         path + "\n" + extra + test::inventory_stages_yaml() +
         "metrics:\n  listen: 127.0.0.1:0\nlogging:\n  level: warn\n" + sink_section;
}

std::string sqlite_sink(const std::string& db) {
  return "sink:\n  type: sqlite\n  batch_size: 50\n  sqlite:\n    path: " + db + "\n";
}

// Rows of a query on a SQLite database, as text (one string per row, columns by '|').
std::vector<std::string> sqlite_rows(const std::string& db, const std::string& sql) {
  sqlite3* handle = nullptr;
  std::vector<std::string> rows;
  if (sqlite3_open_v2(db.c_str(), &handle, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    sqlite3_close(handle);
    return rows;
  }
  sqlite3_busy_timeout(handle, 5000);
  sqlite3_stmt* statement = nullptr;
  if (sqlite3_prepare_v2(handle, sql.c_str(), -1, &statement, nullptr) == SQLITE_OK)
    while (sqlite3_step(statement) == SQLITE_ROW) {
      std::string row;
      for (int i = 0; i < sqlite3_column_count(statement); ++i) {
        const auto* text = sqlite3_column_text(statement, i);
        row += (i ? "|" : "") + std::string(text ? reinterpret_cast<const char*>(text) : "");
      }
      rows.push_back(row);
    }
  sqlite3_finalize(statement);
  sqlite3_close(handle);
  return rows;
}

long sqlite_count(const std::string& db, const std::string& table) {
  const auto rows = sqlite_rows(db, "SELECT count(*) FROM " + table);
  return rows.empty() ? 0 : std::stol(rows[0]);
}

app::RunSummary drain(const app::PipelineConfig& config) {
  app::RunOptions options;
  options.until_drained = true;
  options.drained_for = 1000ms;
  options.quiet = true;
  app::RunSummary summary;
  EXPECT_EQ(app::run_pipeline(config, options, summary), 0);
  return summary;
}

pid_t spawn_sluice(const std::vector<std::string>& args, int stdin_fd = -1) {
  std::vector<std::string> argv = {SLUICE_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  return test::spawn_quiet(argv, stdin_fd);
}

using test::wait_exit;

std::uint64_t file_size(const std::string& path) {
  return static_cast<std::uint64_t>(std::filesystem::file_size(path));
}

// 20,000 inventory events, 20 % business duplicates written differently, one line
// malformed at a known place; returns the distinct records and that line's number.
struct Written {
  std::size_t lines = 0, distinct = 0, malformed_line = 0;
};
Written write_events(const std::string& path) {
  auto events = app::generate_events(20000, 0.2, 0.0, 7);
  Written w;
  w.distinct = events.distinct_records;
  w.malformed_line = 7777;
  events.bodies.insert(events.bodies.begin() + static_cast<long>(w.malformed_line - 1),
                       "{\"skuId\": \"SKU-1\", \"locationId\": ");  // cut short
  std::ofstream out(path);
  for (const auto& body : events.bodies) out << body << "\n";
  w.lines = events.bodies.size();
  return w;
}

// kill -9 twice while rows are being written, then a restart that drains: the database
// holds exactly the distinct records; the checkpoint covers the whole file.
template <class Count, class Rejects>
void kill_twice_then_drain(const Scratch& scratch, const std::string& sink_section, Count count,
                           Rejects rejected_ids) {
  const std::string input = scratch.path("events.jsonl");
  const auto written = write_events(input);
  const std::string config_path = scratch.path("pipeline.yaml");
  // Checkpoints often: a kill then falls between two of them, mid-file.
  std::ofstream(config_path) << file_yaml(input, sink_section, "    checkpoint_interval: 50ms\n");
  long before = 0;
  for (int round = 0; round < 2; ++round) {
    const pid_t pid = spawn_sluice({"run", "--config", config_path});
    // Work has started (and more than the last round wrote) before the kill.
    const long threshold = before + 2000;
    ASSERT_TRUE(test::wait_until([&] { return count() >= threshold; }, 60s))
        << "round " << round << ": no rows written";
    kill(pid, SIGKILL);
    EXPECT_EQ(wait_exit(pid), -SIGKILL);
    const long after = count();
    EXPECT_LT(after, static_cast<long>(written.distinct)) << "killed mid-run, round " << round;
    before = after;
  }
  // A checkpoint from the killed runs: the restart resumes past the start of the file.
  const auto checkpoint = file::read_checkpoint(input + ".checkpoint");
  ASSERT_EQ(checkpoint.count(input), 1u);
  EXPECT_GT(checkpoint.at(input).line, 0u);
  EXPECT_LT(checkpoint.at(input).line, written.lines);

  const pid_t pid = spawn_sluice({"run", "--config", config_path, "--until-drained"});
  EXPECT_EQ(wait_exit(pid), 0);
  EXPECT_EQ(count(), static_cast<long>(written.distinct)) << "nothing lost, nothing twice";
  const auto done = file::read_checkpoint(input + ".checkpoint");
  EXPECT_EQ(done.at(input).line, written.lines);
  EXPECT_EQ(done.at(input).offset, file_size(input));
  // The malformed line, rejected with its place in the file, in one row (a kill
  // between its reject row and the checkpoint has it rejected again: no second row).
  const auto ids = rejected_ids();
  ASSERT_EQ(ids.size(), 1u);
  EXPECT_EQ(ids.front(), input + ":" + std::to_string(written.malformed_line));
}

}  // namespace

TEST(FileSource, KillNineTwiceThenRestartLeavesExactlyTheDistinctRecordsInSqlite) {
  Scratch scratch("kill-sqlite");
  const std::string db = scratch.path("records.db");
  kill_twice_then_drain(
      scratch, sqlite_sink(db), [&] { return sqlite_count(db, "records"); },
      [&] { return sqlite_rows(db, "SELECT message_id FROM rejects"); });
}

TEST(FileSource, KillNineTwiceThenRestartLeavesExactlyTheDistinctRecordsInPostgres) {
  Scratch scratch("kill-postgres");
  auto& pg = test::Postgres::shared();
  const std::string table = "file_" + std::to_string(getpid());
  auto count = [&] {
    try {
      const auto text = pg.query("SELECT count(*) FROM " + table);
      return text.find_first_of("0123456789") == std::string::npos ? 0L : std::stol(text);
    } catch (const std::exception&) {
      return 0L;  // the table is not there yet
    }
  };
  kill_twice_then_drain(
      scratch,
      "sink:\n  type: postgres\n  batch_size: 50\n  table: " + table +
          "\n  rejects_table: " + table + "_rejects\n  postgres:\n    dsn: " + pg.dsn() + "\n",
      count, [&] {
        std::vector<std::string> ids;
        std::istringstream rows(pg.query("SELECT message_id FROM " + table + "_rejects"));
        for (std::string line; std::getline(rows, line);) {
          line.erase(0, line.find_first_not_of(' '));
          if (!line.empty()) ids.push_back(line);
        }
        return ids;
      });
  pg.query("DROP TABLE " + table + "; DROP TABLE " + table + "_rejects");
}

// A figure of `sluice run`'s summary ("received", "written (new)", "duplicates"), or -1.
long summary_figure(const std::string& text, const std::string& label) {
  const auto at = text.find("\n  " + label + " ");
  if (at == std::string::npos) return -1;
  return std::stol(text.substr(text.find_first_not_of(' ', at + 3 + label.size())));
}

// A file into PostgreSQL killed (-9) mid-run: each batch committed the files' position
// with its rows (the run writes no checkpoint file: its interval is an hour), so the
// restart reads exactly the lines after the last row written: it finds no duplicate,
// and the two runs together wrote each record once.
TEST(FileSource, AKilledRunsPositionIsCommittedWithItsRowsAndTheRestartRedoesNothing) {
  Scratch scratch("rows-position");
  auto& pg = test::Postgres::shared();
  const std::string table = "file_rows_" + std::to_string(getpid());
  const std::string input = scratch.path("events.jsonl");
  const auto events = app::generate_events(20000, 0.0, 0.0, 11);
  {
    std::ofstream out(input);
    for (const auto& body : events.bodies) out << body << "\n";
  }
  const long total = static_cast<long>(events.distinct_records);
  ASSERT_EQ(total, 20000);
  const std::string config_path = scratch.path("pipeline.yaml");
  // Rate-limited, so that the kill comes mid-file.
  std::string yaml = file_yaml(input,
                               "sink:\n  type: postgres\n  batch_size: 50\n  table: " + table +
                                   "\n  rejects_table: " + table +
                                   "_rejects\n  postgres:\n    dsn: " + pg.dsn() + "\n",
                               "    checkpoint_interval: 1h\n");
  const std::string in_flight = "  max_in_flight: 100\n";
  yaml.replace(yaml.find(in_flight), in_flight.size(),
               in_flight + "  max_messages_per_second: 4000\n");
  std::ofstream(config_path) << yaml;
  const auto number = test::postgres_number;
  auto rows = [&] { return number("SELECT count(*) FROM " + table); };
  const std::string key = "file checkpoint=" + input + ".checkpoint pipeline=default#rows";
  auto position = [&] {
    return number("SELECT position::json->'files'->'" + input +
                  "'->>'line' FROM sluice_positions WHERE key = '" + key + "'");
  };
  const pid_t killed = spawn_sluice({"run", "--config", config_path});
  ASSERT_TRUE(test::wait_until([&] { return rows() >= 3000; }, 60s)) << "no rows written";
  kill(killed, SIGKILL);
  EXPECT_EQ(wait_exit(killed), -SIGKILL);
  const long written = rows();
  EXPECT_LT(written, total) << "killed mid-run";
  EXPECT_FALSE(std::filesystem::exists(input + ".checkpoint")) << "no checkpoint file yet";
  EXPECT_EQ(position(), written) << "the position committed with the last batch";

  const std::string out = scratch.path("summary.txt");
  const int null_fd = ::open("/dev/null", O_RDONLY);
  const int out_fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const pid_t restarted = test::spawn_child(
      {SLUICE_BINARY, "run", "--config", config_path, "--until-drained"}, null_fd, out_fd, 2);
  ::close(null_fd);
  ::close(out_fd);
  EXPECT_EQ(wait_exit(restarted), 0);
  std::ifstream in(out);
  const std::string summary((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(summary_figure(summary, "received"), total - written) << summary;
  EXPECT_EQ(summary_figure(summary, "written (new)"), total - written) << summary;
  EXPECT_EQ(summary_figure(summary, "duplicates"), 0) << summary;
  EXPECT_EQ(rows(), total);
  EXPECT_EQ(position(), total);
  pg.query("DROP TABLE " + table + "; DROP TABLE " + table + "_rejects; DELETE FROM " +
           "sluice_positions WHERE key LIKE 'file checkpoint=" + input + "%'");
}

TEST(FileSource, ACleanStopIsResumedNotReadAgain) {
  Scratch scratch("resume");
  const std::string input = scratch.path("a.jsonl"), db = scratch.path("r.db");
  auto events = app::generate_events(500, 0.0, 0.0, 3);
  {
    std::ofstream out(input);
    for (const auto& body : events.bodies) out << body << "\n";
    out << "\n   \n";  // blank lines carry nothing
  }
  const auto config = app::parse_config(file_yaml(input, sqlite_sink(db)));
  const auto first = drain(config);
  EXPECT_EQ(first.received, 500u);
  EXPECT_EQ(first.written, events.distinct_records);
  // Appended later: the next run reads only what is new.
  {
    std::ofstream out(input, std::ios::app);
    for (const auto& body : app::generate_events(40, 0.0, 0.0, 4).bodies) out << body << "\n";
  }
  const auto second = drain(config);
  EXPECT_EQ(second.received, 40u) << "the checkpoint is where the first run stopped";
  EXPECT_EQ(file::read_checkpoint(input + ".checkpoint").at(input).offset, file_size(input));
}

// A writer still appending: its last line has no newline yet. It is waited for (the run
// does not end drained, the line is not rejected), and read whole once finished.
TEST(FileSource, ALastLineStillBeingWrittenIsWaitedForNotRejected) {
  Scratch scratch("partial");
  const std::string input = scratch.path("growing.jsonl"), db = scratch.path("r.db");
  const std::string whole =
      R"({"skuId":"SKU-PARTIAL","locationId":"LOC-1","eventType":"ADJUST","quantity":4})";
  {
    std::ofstream out(input);
    for (const auto& body : app::generate_events(30, 0.0, 0.0, 5).bodies) out << body << "\n";
    out << whole.substr(0, 20);  // cut mid-line, no newline
  }
  const auto config =
      app::parse_config(file_yaml(input, sqlite_sink(db), "    partial_line_wait: 20s\n"));
  auto run = std::async(std::launch::async, [&] { return drain(config); });
  // The complete lines are in, the partial one is not, and the run goes on.
  ASSERT_TRUE(test::wait_until([&] { return sqlite_count(db, "records") == 30; }, 30s));
  // The line stays unfinished for longer than --until-drained's 1 s of quiet (correct
  // code never drains meanwhile, however slow the machine).
  test::hold_fault_for(1500ms);
  ASSERT_EQ(run.wait_for(0s), std::future_status::timeout) << "drained with a line unread";
  {
    std::ofstream out(input, std::ios::app);
    out << whole.substr(20) << "\n";
  }
  const auto summary = run.get();
  EXPECT_EQ(summary.received, 31u);
  EXPECT_EQ(summary.written, 31u);
  EXPECT_EQ(summary.rejected_malformed, 0u);
  EXPECT_EQ(sqlite_rows(db, "SELECT count(*) FROM records WHERE document LIKE '%SKU-PARTIAL%'"),
            std::vector<std::string>{"1"});
}

// Standard input: `... | sluice run` with path "-", drained at the end of the input.
TEST(FileSource, StandardInputIsReadToItsEnd) {
  Scratch scratch("stdin");
  const std::string db = scratch.path("r.db"), config_path = scratch.path("p.yaml");
  std::ofstream(config_path) << file_yaml("'-'", sqlite_sink(db));
  const auto events = app::generate_events(1000, 0.25, 0.0, 9);
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  const pid_t pid = spawn_sluice({"run", "--config", config_path, "--until-drained"}, pipe_fds[0]);
  ::close(pipe_fds[0]);
  // Written in pieces, with pauses: reads must wait for more, not end early.
  std::string text;
  for (const auto& body : events.bodies) text += body + "\n";
  for (std::size_t at = 0; at < text.size(); at += 7000) {
    const auto piece = text.substr(at, 7000);
    ASSERT_EQ(::write(pipe_fds[1], piece.data(), piece.size()), static_cast<ssize_t>(piece.size()));
    test::work_for(20ms);  // the producer's pace between pieces
  }
  ::close(pipe_fds[1]);
  EXPECT_EQ(wait_exit(pid), 0);
  EXPECT_EQ(sqlite_count(db, "records"), static_cast<long>(events.distinct_records));
}

TEST(FileSource, AMissingFileIsAnErrorAtStartNamingTheKey) {
  Scratch scratch("missing");
  const std::string config_path = scratch.path("p.yaml");
  std::ofstream(config_path) << file_yaml(scratch.path("nope-*.jsonl"),
                                          sqlite_sink(scratch.path("r.db")),
                                          "    checkpoint: " + scratch.path("c.json") + "\n");
  const auto [code, output] =
      test::run_with_status(std::string(SLUICE_BINARY) + " run --config " + config_path + " 2>&1");
  EXPECT_EQ(code, 2) << output;
  EXPECT_NE(output.find("source.file.path (SLUICE_FILE_PATH): no file matches"), std::string::npos)
      << output;
  // A checkpoint that is not one: refused, never taken for "start from zero".
  std::ofstream(scratch.path("c.json")) << "{\"version\": 1, \"files\": []}";
  std::ofstream(scratch.path("nope-1.jsonl")) << "{}\n";
  const auto [code2, output2] =
      test::run_with_status(std::string(SLUICE_BINARY) + " run --config " + config_path + " 2>&1");
  EXPECT_EQ(code2, 2) << output2;
  EXPECT_NE(output2.find("source.file.checkpoint (SLUICE_FILE_CHECKPOINT)"), std::string::npos)
      << output2;
}

// A file replaced under the same name between two runs is another file (its inode): it
// is read from its start, not from the old one's checkpoint.
TEST(FileSource, AFileReplacedUnderItsNameIsReadFromItsStart) {
  Scratch scratch("replaced");
  const std::string input = scratch.path("in.jsonl"), db = scratch.path("r.db");
  const auto config = app::parse_config(file_yaml(input, sqlite_sink(db)));
  const auto first = app::generate_events(50, 0.0, 0.0, 21);
  {
    std::ofstream out(input);
    for (const auto& body : first.bodies) out << body << "\n";
  }
  EXPECT_EQ(drain(config).received, 50u);
  // A new file moved into place, longer than the first: by offset alone it would be
  // read from the old checkpoint's middle.
  const auto second = app::generate_events(80, 0.0, 0.0, 22);
  {
    std::ofstream out(input + ".new");
    for (const auto& body : second.bodies) out << body << "\n";
  }
  std::filesystem::rename(input + ".new", input);
  const auto summary = drain(config);
  EXPECT_EQ(summary.received, 80u);
  EXPECT_EQ(summary.rejected_malformed, 0u) << "no line read from the middle";
}

// A line longer than max_line_bytes is rejected, never stored, even when it arrives whole
// in one read; standard lines beside it are stored.
TEST(FileSource, ALineLongerThanTheLimitIsRejectedWithItsReason) {
  Scratch scratch("long");
  const std::string input = scratch.path("in.jsonl"), db = scratch.path("r.db");
  {
    std::ofstream out(input);
    out << R"({"skuId":"A","locationId":"L","eventType":"E","quantity":1})"
        << "\n";
    out << R"({"skuId":")" << std::string(500, 'x')
        << R"(","locationId":"L","eventType":"E","quantity":2})"
        << "\n";
    out << R"({"skuId":"B","locationId":"L","eventType":"E","quantity":3})"
        << "\n";
  }
  const auto summary =
      drain(app::parse_config(file_yaml(input, sqlite_sink(db), "    max_line_bytes: 100\n")));
  EXPECT_EQ(summary.written, 2u);
  EXPECT_EQ(summary.rejected_by_source.count("line_too_long"), 1u);
  EXPECT_EQ(sqlite_rows(db, "SELECT message_id, reason FROM rejects"),
            std::vector<std::string>{input + ":2|line_too_long"});
}

// A glob of more files than the process may open at once: they are opened one at a time.
TEST(FileSource, AGlobOfMoreFilesThanDescriptorsIsReadWhole) {
  Scratch scratch("many");
  const std::string db = scratch.path("r.db"), config_path = scratch.path("p.yaml");
  std::filesystem::create_directories(scratch.path("in"));
  std::size_t distinct = 0;
  for (int f = 0; f < 300; ++f) {
    std::ofstream out(scratch.path("in/" + std::to_string(10000 + f) + ".jsonl"));
    out << R"({"skuId":"S)" << f << R"(","locationId":"L","eventType":"E","quantity":1})"
        << "\n";
    ++distinct;
  }
  std::ofstream(config_path) << file_yaml(scratch.path("in") + "/*.jsonl", sqlite_sink(db),
                                          "    checkpoint: " + scratch.path("ckpt.json") + "\n");
  const auto [code, output] =
      test::run_with_status("ulimit -n 128 && " + std::string(SLUICE_BINARY) + " run --config " +
                            config_path + " --until-drained 2>&1");
  EXPECT_EQ(code, 0) << output;
  EXPECT_EQ(sqlite_count(db, "records"), static_cast<long>(distinct)) << output;
}

// Following a file that is truncated and written again (copytruncate): the new lines are
// read from the start, not skipped as already read.
TEST(FileSource, FollowingAFileThatIsTruncatedReadsItAgainFromItsStart) {
  Scratch scratch("truncate");
  const std::string input = scratch.path("log.jsonl"), db = scratch.path("r.db");
  auto write = [&](int from, int to, std::ios::openmode mode) {
    std::ofstream out(input, mode);
    for (int i = from; i < to; ++i)
      out << R"({"skuId":"T)" << i << R"(","locationId":"L","eventType":"E","quantity":1})"
          << "\n";
  };
  write(0, 6, std::ios::trunc);
  const auto config = app::parse_config(file_yaml(input, sqlite_sink(db), "    follow: true\n"));
  auto run = std::async(std::launch::async, [&] { return drain(config); });
  ASSERT_TRUE(test::wait_until([&] { return sqlite_count(db, "records") == 6; }, 30s));
  write(6, 10, std::ios::trunc);  // shorter than what was read: truncated, then written
  ASSERT_TRUE(test::wait_until([&] { return sqlite_count(db, "records") == 10; }, 30s))
      << sqlite_count(db, "records") << " records";
  EXPECT_EQ(run.get().rejected_malformed, 0u);
}

// What a run needs of its checkpoint is checked at start: a folder that is not there is
// exit 2 naming the key, not warnings forever and every line read again at each restart.
TEST(FileSource, ACheckpointThatCannotBeWrittenIsAnErrorAtStart) {
  Scratch scratch("ckpt-folder");
  const std::string input = scratch.path("in.jsonl"), config_path = scratch.path("p.yaml");
  std::ofstream(input) << R"({"skuId":"A","locationId":"L","eventType":"E","quantity":1})"
                       << "\n";
  std::ofstream(config_path) << file_yaml(input, sqlite_sink(scratch.path("r.db")),
                                          "    checkpoint: " + scratch.path("nope/c.json") + "\n");
  const auto [code, output] =
      test::run_with_status(std::string(SLUICE_BINARY) + " run --config " + config_path + " 2>&1");
  EXPECT_EQ(code, 2) << output;
  EXPECT_NE(output.find("source.file.checkpoint (SLUICE_FILE_CHECKPOINT)"), std::string::npos)
      << output;
  EXPECT_NE(output.find("not writable"), std::string::npos) << output;
}
