#include "sqs/dead_letter_verbs.hpp"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "driver/verbs.hpp"
#include "runtime/token_bucket.hpp"
#include "sluice/aws/error.hpp"
#include "sluice/sqs/client.hpp"
#include "sqs/verbs.hpp"

namespace sluice::sqs {
namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

namespace {

// The attributes the SQS source puts on a dead letter (sqs_source.cpp).
constexpr const char* kReason = "sluice-reject-reason";
constexpr const char* kSourceQueue = "sluice-source-queue";
constexpr const char* kMessageId = "sluice-message-id";

// SQS's own flags, and the ones every source shares (read when the verb runs).
struct DlqFlags {
  std::string queue_url, endpoint_url, region;
  int visibility_timeout = 30;
  std::string method = "auto";
  const driver::DeadLetterRequest* shared = nullptr;
};

// The shared flags with SQS's, as the verbs read them.
struct DlqRequest : driver::DeadLetterRequest, DlqFlags {
  explicit DlqRequest(const DlqFlags& f) : driver::DeadLetterRequest(*f.shared), DlqFlags(f) {}
};

std::string attribute(const Message& m, const char* name) {
  const auto it = m.message_attributes.find(name);
  return it == m.message_attributes.end() ? "" : it->second.string_value;
}

SqsClientOptions client_options(const DlqRequest& f) {
  SqsClientOptions o;
  o.endpoint_url = f.endpoint_url;
  o.region = f.region;
  return o;
}

// Runs `body` on an I/O context; AWS errors become exit codes (2: the user's to fix).
int run(const char* verb, const std::function<asio::awaitable<int>(SqsClient&)>& body,
        const DlqRequest& f) {
  asio::io_context io;
  try {
    SqsClient client(io.get_executor(), client_options(f));
    auto result = asio::co_spawn(io, body(client), asio::use_future);
    io.run();
    return result.get();
  } catch (const aws::AwsError& e) {
    std::cerr << "sluice dlq " << verb << ": " << e.what() << "\n";
    return exit_code_of(e);
  }
}

// Up to `max` distinct messages, left where they are (visibility 0). SQS samples its
// servers: a few rounds that bring nothing new end the look.
asio::awaitable<std::vector<Message>> look(SqsClient& client, const std::string& url,
                                           std::size_t max) {
  std::vector<Message> found;
  std::set<std::string> seen;
  int idle_rounds = 0;
  while (found.size() < max && idle_rounds < 3) {
    ReceiveMessageRequest request;
    request.queue_url = url;
    request.max_messages = static_cast<int>(std::min<std::size_t>(10, max - found.size()));
    request.wait_time_seconds = 1;
    request.visibility_timeout = 0;
    bool fresh = false;
    for (auto& m : co_await client.receive_message(request))
      if (seen.insert(m.message_id).second && found.size() < max) {
        found.push_back(std::move(m));
        fresh = true;
      }
    idle_rounds = fresh ? 0 : idle_rounds + 1;
  }
  co_return found;
}

asio::awaitable<int> stats(SqsClient& client, const DlqRequest& f) {
  const auto a = co_await client.get_queue_attributes(f.queue_url);
  auto of = [&](const char* name) {
    const auto it = a.find(name);
    return it == a.end() ? std::string("?") : it->second;
  };
  std::cout << "dead letters   " << of("ApproximateNumberOfMessages") << " visible, "
            << of("ApproximateNumberOfMessagesNotVisible") << " in flight, "
            << of("ApproximateNumberOfMessagesDelayed") << " delayed\n";
  const auto sample = co_await look(client, f.queue_url, 100);
  std::map<std::string, std::size_t> reasons, sources;
  for (const auto& m : sample) {
    const auto reason = attribute(m, kReason);
    ++reasons[reason.empty() ? "(none: moved by the queue's redrive policy)" : reason];
    const auto source = attribute(m, kSourceQueue);
    if (!source.empty()) ++sources[source];
  }
  std::cout << "reasons        (a sample of " << sample.size() << ")\n";
  for (const auto& [reason, n] : reasons) std::cout << "  " << reason << "  " << n << "\n";
  for (const auto& [source, n] : sources) std::cout << "from           " << source << "\n";
  co_return 0;
}

asio::awaitable<int> peek(SqsClient& client, const DlqRequest& f) {
  const auto found = co_await look(client, f.queue_url, f.max == 0 ? 10 : f.max);
  for (const auto& m : found) {
    const auto sent = m.sent_time();
    const long long sent_ms =
        sent ? std::chrono::duration_cast<std::chrono::milliseconds>(sent->time_since_epoch())
                   .count()
             : 0;
    if (f.json) {
      nlohmann::json line{{"message_id", m.message_id},
                          {"reason", attribute(m, kReason)},
                          {"source_queue", attribute(m, kSourceQueue)},
                          {"original_message_id", attribute(m, kMessageId)},
                          {"receive_count", m.receive_count()},
                          {"sent_timestamp_ms", sent_ms},
                          {"body", m.body}};
      std::cout << line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
      continue;
    }
    const auto reason = attribute(m, kReason);
    std::cout << m.message_id << "  reason=" << (reason.empty() ? "-" : reason)
              << "  receives=" << m.receive_count() << "  from=" << attribute(m, kSourceQueue)
              << "\n  " << (m.body.size() > 200 ? m.body.substr(0, 200) + "..." : m.body) << "\n";
  }
  std::cerr << "sluice dlq peek: " << found.size() << " shown, none consumed\n";
  co_return 0;
}

// Codes with which a service says it has no such operation.
bool unsupported(const aws::AwsError& e) {
  // InvalidParameterValue: SQS moves only from a queue that some queue's RedrivePolicy
  // names (a dead-letter queue only sluice writes to is not one).
  for (const char* code : {"UnsupportedOperation", "UnknownOperation", "InvalidAction",
                           "NotImplemented", "UnknownOperationException", "InvalidParameterValue"})
    if (e.code().find(code) != std::string::npos) return true;
  return e.http_status() == 404 || e.http_status() == 501;
}

asio::awaitable<int> move_task(SqsClient& client, const DlqRequest& f) {
  // Named, not braced in the co_await: GCC 12 mis-compiles such temporaries.
  const std::vector<std::string> arn{"QueueArn"};
  const auto from = co_await client.get_queue_attributes(f.queue_url, arn);
  const auto to = co_await client.get_queue_attributes(f.to, arn);
  const auto handle = co_await client.start_message_move_task(
      from.at("QueueArn"), to.at("QueueArn"), static_cast<int>(f.rate));
  std::cerr << "sluice dlq redrive: StartMessageMoveTask started; the service moves the "
               "messages (stopping this command does not stop it)\n";
  // Watched until it ends, as the copy is: the latest task of the queue is this one.
  const bool tty = isatty(STDERR_FILENO);
  asio::steady_timer timer(co_await asio::this_coro::executor);
  for (;;) {
    const auto tasks = co_await client.list_message_move_tasks(from.at("QueueArn"));
    if (tasks.empty()) {
      std::cerr << "sluice dlq redrive: the service lists no move task; task " << handle << "\n";
      co_return 1;
    }
    const auto& task = tasks.front();
    const bool running = task.status == "RUNNING" || task.status == "CANCELLING";
    std::cerr << (tty ? "\r" : "") << "sluice dlq redrive: " << task.moved << " moved"
              << (task.to_move ? " of " + std::to_string(*task.to_move) : std::string()) << ", "
              << task.status << ((running && tty) ? "" : "\n") << std::flush;
    if (!running) {
      if (task.status == "COMPLETED") co_return 0;
      std::cerr << "sluice dlq redrive: the move task ended " << task.status
                << (task.failure_reason.empty() ? "" : ": " + task.failure_reason) << "\n";
      co_return 1;
    }
    timer.expires_after(std::chrono::seconds(1));
    co_await timer.async_wait(asio::use_awaitable);
  }
}

asio::awaitable<int> copy(SqsClient& client, const DlqRequest& f) {
  // The count now is the most this run looks at: a message that dies again comes back
  // as a new one (its consumer fails again, a queue whose messages expire into this
  // one) and is left for the next run instead of going round.
  const std::vector<std::string> counts{"ApproximateNumberOfMessages",
                                        "ApproximateNumberOfMessagesNotVisible"};
  const auto at_start = co_await client.get_queue_attributes(f.queue_url, counts);
  std::size_t budget = 0;
  for (const auto& name : counts)
    if (const auto it = at_start.find(name); it != at_start.end()) budget += std::stoul(it->second);
  std::set<std::string> seen;  // message ids received in this run
  auto executor = co_await asio::this_coro::executor;
  asio::steady_timer timer(executor);
  std::optional<runtime::TokenBucket> bucket;
  if (f.rate > 0) bucket.emplace(f.rate, std::min(f.rate, 10.0), Clock::now());
  const bool fifo = f.to.ends_with(".fifo");
  const bool tty = isatty(STDERR_FILENO);
  const auto started = Clock::now();
  auto last_moved_at = started;  // the rate is over the time spent moving
  std::size_t moved = 0, failed = 0, errors_shown = 0;
  std::map<std::string, std::string> skipped;  // message id -> latest receipt
  std::map<std::string, int> refusals;         // message id -> sends refused
  constexpr int kMaxRefusals = 2;              // then it stays in the dead-letter queue
  auto progress = [&](bool last) {
    const double s = std::chrono::duration<double>(last_moved_at - started).count();
    std::cerr << (tty ? "\r" : "") << "sluice dlq redrive: " << moved << " moved, " << failed
              << " failed, " << skipped.size() << " skipped, "
              << static_cast<long>(static_cast<double>(moved) / std::max(s, 1e-3)) << " msg/s"
              << (last || !tty ? "\n" : "") << std::flush;
  };
  auto last_progress = Clock::now();
  std::size_t last_moved = 0;
  int empty_rounds = 0;
  while ((f.max == 0 || moved < f.max) && empty_rounds < 2 && seen.size() < budget) {
    int wanted = 10;
    if (f.max > 0) wanted = static_cast<int>(std::min<std::size_t>(10, f.max - moved));
    if (bucket) {
      Clock::duration wait{};
      int taken = 0;
      while ((taken = bucket->take(wanted, Clock::now(), wait)) == 0) {
        timer.expires_after(wait);
        co_await timer.async_wait(asio::use_awaitable);
      }
      wanted = taken;
    }
    ReceiveMessageRequest request;
    request.queue_url = f.queue_url;
    request.max_messages = wanted;
    request.wait_time_seconds = 1;
    request.visibility_timeout = f.visibility_timeout;
    auto received = co_await client.receive_message(request);
    empty_rounds = received.empty() ? empty_rounds + 1 : 0;
    std::vector<SendMessageEntry> entries;
    std::vector<std::string> receipts, ids;
    for (auto& m : received) {
      seen.insert(m.message_id);
      const auto refused = refusals.find(m.message_id);
      if ((!f.filter_reason.empty() && attribute(m, kReason) != f.filter_reason) ||
          (refused != refusals.end() && refused->second >= kMaxRefusals)) {
        skipped[m.message_id] = m.receipt_handle;  // released at the end
        continue;
      }
      SendMessageEntry e;
      e.id = std::to_string(entries.size());
      e.body = std::move(m.body);
      e.message_attributes = std::move(m.message_attributes);
      for (const char* ours : {kReason, kSourceQueue, kMessageId}) e.message_attributes.erase(ours);
      // A standard (fair) queue's group id goes back with it too.
      e.message_group_id = m.group_id().value_or(fifo ? "redrive" : "");
      if (fifo) e.message_deduplication_id = m.message_id;  // a second redrive: deduplicated
      entries.push_back(std::move(e));
      receipts.push_back(std::move(m.receipt_handle));
      ids.push_back(m.message_id);
    }
    if (bucket) bucket->returned(wanted, static_cast<int>(entries.size()));
    if (!entries.empty()) {
      const auto sent = co_await client.send_message_batch(f.to, std::move(entries));
      // Deleted only once the destination has it.
      std::vector<DeleteMessageEntry> deletes;
      for (const auto& ok : sent.successful)
        deletes.push_back({ok.id, receipts.at(std::stoul(ok.id))});
      std::vector<ChangeVisibilityEntry> back;
      for (const auto& bad : sent.failed) {
        const auto index = std::stoul(bad.id);
        back.push_back({bad.id, receipts.at(index), 0});
        if (++refusals[ids.at(index)] == kMaxRefusals) ++failed;  // given up: counted once
        if (errors_shown++ < 5)
          std::cerr << "sluice dlq redrive: " << ids.at(index)
                    << " not sent (left in the dead-letter queue): " << bad.code << " "
                    << bad.message << "\n";
      }
      if (!deletes.empty()) {
        const auto deleted = co_await client.delete_message_batch(f.queue_url, deletes);
        moved += deleted.successful.size();
        last_moved_at = Clock::now();
        // Sent but not deleted: it comes back and is sent again (the hash absorbs it).
        failed += deleted.failed.size();
      }
      if (!back.empty()) co_await client.change_message_visibility_batch(f.queue_url, back);
    }
    if (moved != last_moved && Clock::now() - last_progress > std::chrono::milliseconds(500)) {
      progress(false);
      last_progress = Clock::now();
      last_moved = moved;
    }
  }
  // The ones picked out stay, visible again at once.
  std::vector<ChangeVisibilityEntry> release;
  for (const auto& [id, receipt] : skipped) {
    release.push_back({std::to_string(release.size()), receipt, 0});
    if (release.size() == 10) {
      co_await client.change_message_visibility_batch(f.queue_url, release);
      release.clear();
    }
  }
  if (!release.empty()) co_await client.change_message_visibility_batch(f.queue_url, release);
  // Refused, and not tried again before the run ended: failed too.
  for (const auto& [id, n] : refusals)
    if (n < kMaxRefusals) ++failed;
  progress(true);
  if (seen.size() >= budget && empty_rounds < 2 && (f.max == 0 || moved < f.max))
    std::cerr << "sluice dlq redrive: ended after the " << budget
              << " dead letters there were at the start (any that arrived since are left for "
                 "another run)\n";
  co_return failed == 0 ? 0 : 1;
}

// A queue's ARN, the flag that named it in the error when it is missing.
asio::awaitable<std::string> arn_of(SqsClient& client, const std::string& url, const char* flag) {
  const std::vector<std::string> names{"QueueArn", "FifoQueue"};
  try {
    const auto a = co_await client.get_queue_attributes(url, names);
    const auto it = a.find("QueueArn");
    co_return it == a.end() ? url : it->second;
  } catch (const aws::AwsError& e) {
    throw aws::AwsError(e.kind(), std::string(flag) + " " + url + ": " + e.what(), e.code(),
                        e.http_status());
  }
}

asio::awaitable<int> redrive(SqsClient& client, const DlqRequest& f) {
  // Both queues exist, and are two: checked before anything is received.
  if (co_await arn_of(client, f.queue_url, "--queue-url") ==
      co_await arn_of(client, f.to, "--to")) {
    std::cerr << "sluice dlq redrive: --to is the dead-letter queue itself\n";
    co_return 2;
  }
  if (!f.filter_reason.empty() && f.queue_url.ends_with(".fifo")) {
    std::cerr << "sluice dlq redrive: --filter-reason on a FIFO dead-letter queue: it hands "
                 "out one message of a group at a time, so a message left behind would hold "
                 "its group; redrive them all, or with --max\n";
    co_return 2;
  }
  const bool picks = !f.filter_reason.empty() || f.max > 0;
  // The service's pace is whole messages a second, 1 to 500.
  const bool whole_rate =
      f.rate == 0 || (f.rate >= 1 && f.rate <= 500 && f.rate == std::floor(f.rate));
  if (f.method == "move-task" && picks) {
    std::cerr << "sluice dlq redrive: --method move-task moves every message (the service "
                 "picks none out): leave out --filter-reason and --max, or use --method copy\n";
    co_return 2;
  }
  if (f.method == "move-task" && !whole_rate) {
    std::cerr << "sluice dlq redrive: --method move-task takes --rate as whole messages a second "
                 "from 1 to 500 (StartMessageMoveTask's MaxNumberOfMessagesPerSecond)\n";
    co_return 2;
  }
  if (f.method == "move-task" || (f.method == "auto" && !picks && whole_rate)) {
    try {
      co_return co_await move_task(client, f);
    } catch (const aws::AwsError& e) {
      if (f.method == "move-task" && e.code().find("InvalidParameterValue") != std::string::npos) {
        std::cerr << "sluice dlq redrive: StartMessageMoveTask refused: " << e.what()
                  << " (the service moves only from a queue that some queue's RedrivePolicy "
                     "names; --method copy moves from any)\n";
        co_return 2;
      }
      if (f.method == "move-task" || !unsupported(e)) throw;
      std::cerr << "sluice dlq redrive: StartMessageMoveTask refused (" << e.code()
                << ": the service has none, or this queue is no queue's redrive target): moving "
                   "by receive, send, then delete\n";
    }
  }
  co_return co_await copy(client, f);
}

}  // namespace

void add_dead_letter_verbs(const driver::VerbCommands& commands, driver::SourceVerbs& verbs) {
  auto f = std::make_shared<DlqFlags>();
  f->shared = commands.dead_letters;
  for (auto* verb : {commands.dlq_stats, commands.dlq_peek, commands.dlq_redrive}) {
    verb->add_option("--queue-url", f->queue_url, "SQS: the dead-letter queue");
    verb->add_option("--endpoint-url", f->endpoint_url, "SQS endpoint");
    verb->add_option("--region", f->region, "AWS region");
  }
  auto* redrive_flags = commands.dlq_redrive;
  redrive_flags
      ->add_option("--visibility-timeout", f->visibility_timeout,
                   "SQS: seconds a message is hidden while it is moved (a killed redrive's "
                   "messages come back after it)")
      ->check(CLI::Range(1, 43200))
      ->capture_default_str();
  redrive_flags
      ->add_option("--method", f->method,
                   "SQS: auto: StartMessageMoveTask when nothing is picked out and the service "
                   "has it, else copy; move-task; copy (receive, send, delete)")
      ->check(CLI::IsMember({"auto", "move-task", "copy"}))
      ->capture_default_str();
  auto chosen = [f] { return !f->queue_url.empty(); };
  verbs.dlq_stats =
      driver::SourceVerbs::Verb{"--queue-url (SQS)", chosen, false, [f] {
                                  const DlqRequest r(*f);
                                  return run(
                                      "stats", [&r](SqsClient& c) { return stats(c, r); }, r);
                                }};
  verbs.dlq_peek =
      driver::SourceVerbs::Verb{"--queue-url (SQS)", chosen, false, [f] {
                                  const DlqRequest r(*f);
                                  return run(
                                      "peek", [&r](SqsClient& c) { return peek(c, r); }, r);
                                }};
  verbs.dlq_redrive = driver::SourceVerbs::Verb{
      "--queue-url (SQS) with --to", chosen, false, [f]() -> int {
        const DlqRequest r(*f);
        if (r.to.empty()) {
          std::cerr << "sluice dlq redrive: --to: missing, expected the queue URL to move the "
                       "dead letters to\n";
          return 2;
        }
        if (r.to == r.queue_url) {
          std::cerr << "sluice dlq redrive: --to is the dead-letter queue itself\n";
          return 2;
        }
        return run(
            "redrive", [&r](SqsClient& c) { return redrive(c, r); }, r);
      }};
}

}  // namespace sluice::sqs
