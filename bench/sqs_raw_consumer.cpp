// The ceilings of bench_pipeline: bare clients, each in its own process so the harness
// times it from outside like every other contender.
//  - Without a database: LOOPS overlapping receive loops ask what the container asks
//    for (10 messages, all attributes); each batch is deleted without waiting; it
//    exits once COUNT messages are deleted.
//  - With DSN TABLE ROWS: the same loops, and the same database work as the pipeline
//    (bench/pg_rows.hpp: the very rows `sluice run` writes, by the MD5 of each body,
//    which SQS sends as MD5OfBody, with the PostgreSQL sink's statement and group
//    commit); each message is deleted after its row is written, and at most 1,000 are
//    held, as `sluice run` does.
// Exits 0 on SIGTERM.
// FORM: unnest (the sink's), values, select-first or copy-staging (bench/pg_rows.hpp);
// BATCH_WAIT_MS: how long a writer waits to fill a batch (20, the sink's batch_timeout; 0
// for FIFO); ROWS_PER_INSERT: 100, or 1 for one statement per record (seed 001's design).
// Usage: bench_sqs_raw ENDPOINT QUEUE_URL COUNT LOOPS [DSN TABLE ROWS
//        [FORM [BATCH_WAIT_MS [ROWS_PER_INSERT]]]]
#include <algorithm>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <csignal>
#include <cstdio>
#include <cstdlib>

#include "bench_support.hpp"
#include "pg_rows.hpp"

namespace asio = boost::asio;
using namespace sluice;

namespace {

constexpr int kMaxHeld = 1000;

int with_database(asio::io_context& io, const std::shared_ptr<sqs::SqsClient>& client,
                  const std::string& url, int count, int loops, const std::string& dsn,
                  const std::string& table, const std::string& rows_path, const std::string& form,
                  std::chrono::milliseconds batch_wait, std::size_t rows_per_insert) {
  const auto known = bench::load_rows(rows_path);
  if (known.empty()) {
    std::fprintf(stderr, "bench_sqs_raw: no rows in %s\n", rows_path.c_str());
    return 1;
  }
  std::atomic<int> received{0}, held{0}, deleted{0};
  auto work = asio::make_work_guard(io);
  // Written: delete them, in batches of 10, on the I/O thread.
  bench::RowWriters writers(
      dsn, table, form,
      [&](std::vector<bench::PendingRow>&& rows) {
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
      },
      batch_wait, rows_per_insert);

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
            std::vector<bench::PendingRow> rows;
            std::function<void(const sqs::MessageView&)> collect = [&](const sqs::MessageView& m) {
              const auto row = known.find(m.md5_of_body);
              if (row == known.end()) {
                std::fprintf(stderr, "bench_sqs_raw: a body the rows file does not know\n");
                std::exit(1);
              }
              rows.push_back({&row->second.first, &row->second.second, std::string(m.message_id),
                              std::string(m.receipt_handle), 0});
            };
            co_await client->receive_message(request, std::move(collect));
            received += static_cast<int>(rows.size());
            held += static_cast<int>(rows.size());
            writers.add(std::move(rows));
          }
        },
        asio::detached);
  io.run();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5 && (argc < 8 || argc > 11)) {
    std::fprintf(stderr,
                 "usage: %s ENDPOINT QUEUE_URL COUNT LOOPS [DSN TABLE ROWS "
                 "[unnest|values|select-first|copy-staging [BATCH_WAIT_MS [ROWS_PER_INSERT]]]]\n",
                 argv[0]);
    return 2;
  }
  if (argc >= 9) {
    const std::string form = argv[8];
    if (form != "unnest" && form != "values" && form != "select-first" && form != "copy-staging") {
      std::fprintf(stderr,
                   "bench_sqs_raw: FORM is '%s', expected unnest, values, select-first or "
                   "copy-staging\n",
                   argv[8]);
      return 2;
    }
  }
  if (argc == 11 && std::atoi(argv[10]) < 1) {
    std::fprintf(stderr, "bench_sqs_raw: ROWS_PER_INSERT is '%s', expected a positive number\n",
                 argv[10]);
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
                         argv[6], argv[7], argc >= 9 ? argv[8] : "unnest",
                         std::chrono::milliseconds(argc >= 10 ? std::atoi(argv[9]) : 20),
                         argc == 11 ? static_cast<std::size_t>(std::atoi(argv[10]))
                                    : bench::RowWriters::kRowsPerInsert);
  bench::ceiling(io, client, argv[2], std::atoi(argv[3]), std::atoi(argv[4]));
  return 0;
}
