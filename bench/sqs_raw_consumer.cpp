// The ceilings of bench_pipeline: bare clients, each in its own process so the harness
// times it from outside like every other contender.
//  - Without a database: LOOPS overlapping receive loops ask what the container asks
//    for (10 messages, all attributes); each batch is deleted without waiting; it
//    exits once COUNT messages are deleted.
//  - With DSN TABLE ROWS: the same loops, and the same database work as the pipeline:
//    the very rows `sluice run` writes (ROWS maps each body's MD5, which SQS sends as
//    MD5OfBody, to the record's hash and document, worked out by the harness with
//    Sluice's own transform), in the same table shape, the statement the PostgreSQL
//    sink sends (INSERT ... SELECT FROM unnest of binary arrays ... ON CONFLICT (hash) DO
//    NOTHING RETURNING hash, prepared once; FORM "values": the multi-row VALUES with 3
//    parameters per row the sink sent before) with 100 rows on 4 connections, each waiting up to 20
//    ms to fill its batch (the pipeline's default sink.batch_timeout); each message is deleted
//    after its row is written, and at most 1,000 are held, as `sluice run` does. What it does not
//    do is decode, normalize or hash: the pipeline's own work.
// Exits 0 on SIGTERM.
// FORM "select-first": seed 001's rejected dedupe design, a SELECT of the batch's hashes
// first, then the insert of those not found (two round trips per batch).
// Usage: bench_sqs_raw ENDPOINT QUEUE_URL COUNT LOOPS [DSN TABLE ROWS [unnest|values|select-first]]
#include <libpq-fe.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "bench_support.hpp"

namespace asio = boost::asio;
using namespace sluice;

namespace {

constexpr int kWriters = 4;
constexpr std::size_t kRowsPerInsert = 100;
constexpr int kMaxHeld = 1000;

struct Row {
  const std::string* hash;
  const std::string* document;
  std::string message_id, receipt;
};

// Looked up by the received MD5OfBody's view, without a copy.
struct TransparentHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using Rows = std::unordered_map<std::string, std::pair<std::string, std::string>, TransparentHash,
                                std::equal_to<>>;

// ROWS: "md5 <TAB> hash <TAB> document" lines.
Rows load_rows(const std::string& path) {
  Rows rows;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const auto a = line.find('\t'), b = line.find('\t', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    rows[line.substr(0, a)] = {line.substr(a + 1, b - a - 1), line.substr(b + 1)};
  }
  return rows;
}

PGconn* connect(const std::string& dsn) {
  PGconn* conn = PQconnectdb(dsn.c_str());
  if (PQstatus(conn) != CONNECTION_OK) {
    std::fprintf(stderr, "bench_sqs_raw: %s", PQerrorMessage(conn));
    std::exit(1);
  }
  return conn;
}

// PostgreSQL's binary array format, one dimension, no NULLs (as the sink sends it).
std::string binary_array(std::uint32_t element_type, const std::vector<std::string_view>& values) {
  std::string out;
  auto put32 = [&](std::uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8) out += static_cast<char>(v >> shift);
  };
  for (std::uint32_t v : {1u, 0u, element_type, static_cast<std::uint32_t>(values.size()), 1u})
    put32(v);
  for (auto v : values) {
    put32(static_cast<std::uint32_t>(v.size()));
    out.append(v);
  }
  return out;
}

void exec(PGconn* conn, const std::string& sql) {
  PGresult* r = PQexec(conn, sql.c_str());
  if (PQresultStatus(r) != PGRES_COMMAND_OK) {
    std::fprintf(stderr, "bench_sqs_raw: %s", PQresultErrorMessage(r));
    std::exit(1);
  }
  PQclear(r);
}

int with_database(asio::io_context& io, const std::shared_ptr<sqs::SqsClient>& client,
                  const std::string& url, int count, int loops, const std::string& dsn,
                  const std::string& table, const std::string& rows_path, const std::string& form) {
  const bool values_form = form == "values", select_first = form == "select-first";
  const auto known = load_rows(rows_path);
  if (known.empty()) {
    std::fprintf(stderr, "bench_sqs_raw: no rows in %s\n", rows_path.c_str());
    return 1;
  }
  {
    PGconn* conn = connect(dsn);
    exec(conn, "CREATE TABLE IF NOT EXISTS \"" + table +
                   "\" (hash text NOT NULL, message_id text, document jsonb NOT NULL, "
                   "written_at timestamptz NOT NULL DEFAULT now())");
    exec(conn,
         "CREATE UNIQUE INDEX IF NOT EXISTS \"" + table + "_hash\" ON \"" + table + "\" (hash)");
    PQfinish(conn);
  }
  std::mutex mutex;
  std::condition_variable ready;
  std::deque<Row> pending;
  bool stopping = false;
  std::atomic<int> received{0}, held{0}, deleted{0};
  auto work = asio::make_work_guard(io);

  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w)
    writers.emplace_back([&] {
      PGconn* conn = connect(dsn);
      if (!values_form) {
        PGresult* r = PQprepare(conn, "insert_rows",
                                ("INSERT INTO \"" + table +
                                 "\" (hash, message_id, document) SELECT * FROM unnest($1::text[], "
                                 "$2::text[], $3::jsonb[]) ON CONFLICT (hash) DO NOTHING RETURNING "
                                 "hash")
                                    .c_str(),
                                3, nullptr);
        if (PQresultStatus(r) != PGRES_COMMAND_OK) {
          std::fprintf(stderr, "bench_sqs_raw: %s", PQresultErrorMessage(r));
          std::exit(1);
        }
        PQclear(r);
        r = PQprepare(conn, "select_known",
                      ("SELECT hash FROM \"" + table + "\" WHERE hash = ANY($1::text[])").c_str(),
                      1, nullptr);
        if (PQresultStatus(r) != PGRES_COMMAND_OK) {
          std::fprintf(stderr, "bench_sqs_raw: %s", PQresultErrorMessage(r));
          std::exit(1);
        }
        PQclear(r);
      }
      for (;;) {
        std::vector<Row> rows;
        {
          std::unique_lock lock(mutex);
          ready.wait(lock, [&] { return stopping || !pending.empty(); });
          if (stopping) break;
          // The pipeline's group commit (sink.batch_timeout): wait up to 20 ms for a
          // full batch, so that both send PostgreSQL the same statements.
          ready.wait_for(lock, std::chrono::milliseconds(20),
                         [&] { return stopping || pending.size() >= kRowsPerInsert; });
          if (pending.empty()) continue;  // another writer took them meanwhile
          while (!pending.empty() && rows.size() < kRowsPerInsert) {
            rows.push_back(std::move(pending.front()));
            pending.pop_front();
          }
        }
        // In hash order, as the pipeline writes them: concurrent writers then take the
        // unique index's locks in one order and cannot deadlock.
        std::sort(rows.begin(), rows.end(),
                  [](const Row& a, const Row& b) { return *a.hash < *b.hash; });
        PGresult* r = nullptr;
        if (values_form) {
          std::string sql = "INSERT INTO \"" + table + "\" (hash, message_id, document) VALUES ";
          std::vector<const char*> values;
          for (std::size_t i = 0; i < rows.size(); ++i) {
            sql += (i ? ",($" : "($") + std::to_string(3 * i + 1) + ",$" +
                   std::to_string(3 * i + 2) + ",$" + std::to_string(3 * i + 3) + "::jsonb)";
            values.push_back(rows[i].hash->c_str());
            values.push_back(rows[i].message_id.c_str());
            values.push_back(rows[i].document->c_str());
          }
          sql += " ON CONFLICT (hash) DO NOTHING RETURNING hash";
          r = PQexecParams(conn, sql.c_str(), static_cast<int>(values.size()), nullptr,
                           values.data(), nullptr, nullptr, 0);
        } else {
          std::vector<std::string_view> hashes, ids, documents;
          std::vector<std::string> jsonb;  // jsonb's binary format: a version byte, the text
          jsonb.reserve(rows.size());
          // Seed 001's rejected design: ask which records are there, insert the others (a
          // second round trip; ON CONFLICT still settles the writers' races).
          std::unordered_set<std::string> known;
          if (select_first) {
            std::vector<std::string_view> all;
            for (const auto& row : rows) all.push_back(*row.hash);
            const std::string array = binary_array(25, all);
            const char* values[] = {array.data()};
            const int lengths[] = {static_cast<int>(array.size())};
            const int formats[] = {1};
            PGresult* found = PQexecPrepared(conn, "select_known", 1, values, lengths, formats, 0);
            if (PQresultStatus(found) != PGRES_TUPLES_OK) {
              std::fprintf(stderr, "bench_sqs_raw: %s", PQresultErrorMessage(found));
              std::exit(1);
            }
            for (int i = 0; i < PQntuples(found); ++i) known.insert(PQgetvalue(found, i, 0));
            PQclear(found);
          }
          for (const auto& row : rows) {
            if (known.count(*row.hash)) continue;
            hashes.push_back(*row.hash);
            ids.push_back(row.message_id);
            documents.push_back(jsonb.emplace_back("\x01" + *row.document));
          }
          const std::string arrays[] = {binary_array(25, hashes), binary_array(25, ids),
                                        binary_array(3802, documents)};
          const char* values[] = {arrays[0].data(), arrays[1].data(), arrays[2].data()};
          const int lengths[] = {static_cast<int>(arrays[0].size()),
                                 static_cast<int>(arrays[1].size()),
                                 static_cast<int>(arrays[2].size())};
          const int formats[] = {1, 1, 1};
          r = PQexecPrepared(conn, "insert_rows", 3, values, lengths, formats, 0);
        }
        if (PQresultStatus(r) != PGRES_TUPLES_OK) {
          std::fprintf(stderr, "bench_sqs_raw: %s", PQresultErrorMessage(r));
          std::exit(1);
        }
        PQclear(r);
        // Written: delete them, in batches of 10, on the I/O thread.
        asio::post(io, [&, rows = std::move(rows)] {
          for (std::size_t start = 0; start < rows.size(); start += 10) {
            std::vector<sqs::DeleteMessageEntry> entries;
            for (std::size_t j = start; j < std::min(rows.size(), start + 10); ++j)
              entries.push_back({std::to_string(j - start), rows[j].receipt});
            const int n = static_cast<int>(entries.size());
            asio::co_spawn(io, client->delete_message_batch(url, std::move(entries)),
                           [&, n](std::exception_ptr, sqs::BatchResult) {
                             held -= n;
                             if ((deleted += n) >= count) work.reset(), io.stop();
                           });
          }
        });
      }
      PQfinish(conn);
    });

  for (int i = 0; i < loops; ++i)
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          asio::steady_timer wait(co_await asio::this_coro::executor);
          while (received.load() < count) {
            if (held.load() >= kMaxHeld) {
              wait.expires_after(std::chrono::milliseconds(1));
              co_await wait.async_wait(asio::use_awaitable);
              continue;
            }
            sqs::ReceiveMessageRequest request;
            request.queue_url = url;
            request.wait_time_seconds = 1;
            request.visibility_timeout = 30;
            // The client's cheapest receive, as the container's: views, no copies.
            std::vector<Row> rows;
            std::function<void(const sqs::MessageView&)> collect = [&](const sqs::MessageView& m) {
              const auto row = known.find(m.md5_of_body);
              if (row == known.end()) {
                std::fprintf(stderr, "bench_sqs_raw: a body the rows file does not know\n");
                std::exit(1);
              }
              rows.push_back({&row->second.first, &row->second.second, std::string(m.message_id),
                              std::string(m.receipt_handle)});
            };
            co_await client->receive_message(request, std::move(collect));
            received += static_cast<int>(rows.size());
            held += static_cast<int>(rows.size());
            {
              std::lock_guard lock(mutex);
              for (auto& row : rows) pending.push_back(std::move(row));
            }
            ready.notify_all();
          }
        },
        asio::detached);
  io.run();
  {
    std::lock_guard lock(mutex);
    stopping = true;
  }
  ready.notify_all();
  for (auto& w : writers) w.join();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5 && argc != 8 && argc != 9) {
    std::fprintf(
        stderr,
        "usage: %s ENDPOINT QUEUE_URL COUNT LOOPS [DSN TABLE ROWS [unnest|values|select-first]]\n",
        argv[0]);
    return 2;
  }
  std::signal(SIGTERM, [](int) { std::_Exit(0); });
  asio::io_context io;
  sqs::SqsClientOptions options;
  options.endpoint_url = argv[1];
  options.region = "us-east-1";
  // The emulator accepts any signature; these are placeholders, not secrets.
  options.credentials =
      aws::make_static_credentials({"AKIDLOCAL", "local-secret", "", {}, "bench"});
  options.http.use_env_proxy = false;
  auto client = std::make_shared<sqs::SqsClient>(io.get_executor(), options);
  if (argc >= 8)
    return with_database(io, client, argv[2], std::atoi(argv[3]), std::atoi(argv[4]), argv[5],
                         argv[6], argv[7], argc == 9 ? argv[8] : "unnest");
  bench::ceiling(io, client, argv[2], std::atoi(argv[3]), std::atoi(argv[4]));
  return 0;
}
