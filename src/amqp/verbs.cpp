// The command-line verbs of the RabbitMQ source (driver/verbs.hpp): `publish
// --amqp-url` (with confirms), `queue stats --amqp-url`, `queue create --amqp-url` and
// `dlq ... --queue` (dead_letter_verbs.cpp).
#include "amqp/verbs.hpp"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <iostream>

#include "amqp/connection.hpp"
#include "amqp/dead_letter_verbs.hpp"
#include "amqp/queue_admin.hpp"
#include "sluice/amqp/publisher.hpp"

namespace sluice::amqp {
using Clock = std::chrono::steady_clock;

namespace {

struct PublishFlags {
  std::string url;  // also SLUICE_AMQP_URL
  std::string exchange;
  std::string routing_key;
};

struct Flags {
  PublishFlags publish;
  std::string stats_url, stats_queue, management_url;
  std::string create_url, create_dead_letter_queue;
  QueueDeclaration create_declaration;
  std::string autoscale_url, autoscale_queue, autoscale_management_url;
};

// `sluice autoscale --amqp-url`: the unacknowledged messages are the in-flight count,
// which only the management API reports.
class ManagementReader final : public driver::QueueReader {
 public:
  // Throw driver::VerbError, as the management API does.
  ManagementReader(boost::asio::any_io_executor executor, const Flags& flags)
      : api_(std::move(executor), flags.autoscale_url, flags.autoscale_management_url),
        queue_(flags.autoscale_queue) {}
  boost::asio::awaitable<driver::QueueReading> read() override {
    const ManagementCounts counts = co_await api_.queue_counts(queue_);
    co_return driver::QueueReading{static_cast<double>(counts.unacknowledged),
                                   static_cast<double>(counts.ready)};
  }

 private:
  ManagementApi api_;
  std::string queue_;
};

// RabbitMQ: windows of publishes whose confirms are awaited together.
int publish(const PublishFlags& options, driver::PublishRequest request) {
  PublisherOptions o;
  o.uri = options.url;
  std::vector<OutgoingMessage> messages;
  messages.reserve(request.bodies.size());
  for (auto& body : request.bodies) {
    OutgoingMessage m;
    m.body = std::move(body);
    m.routing_key = options.routing_key;
    m.headers = request.headers;
    messages.push_back(std::move(m));
  }
  const std::size_t total = messages.size();
  const auto start = Clock::now();
  const bool tty = request.progress && isatty(STDERR_FILENO);
  auto last_report = Clock::now();
  auto report = [&](std::size_t settled, bool final) {
    if (!request.progress) return;
    if (!final && Clock::now() - last_report < std::chrono::milliseconds(200)) return;
    last_report = Clock::now();
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    std::cerr << (tty ? "\r" : "") << "sluice publish: " << settled << "/" << total
              << " confirmed, " << static_cast<long>(settled / std::max(seconds, 1e-3)) << " msg/s"
              << ((final || !tty) ? "\n" : "") << std::flush;
  };
  try {
    Publisher publisher(o);
    // The caller's trace, as the publisher passes on a handler's: from this thread.
    tracing::ScopedContext traced(request.trace ? &*request.trace : nullptr);
    const auto result = publisher.publish(options.exchange, std::move(messages),
                                          [&](std::size_t settled) { report(settled, false); });
    report(result.confirmed, true);
    if (result.blocked)
      std::cerr << "sluice publish: the broker blocked publishing (connection.blocked: a memory "
                   "or disk alarm) "
                << result.blocked << " time(s), " << result.blocked_for.count() << " ms in all\n";
    for (const auto& e : result.errors) std::cerr << "sluice publish: " << e << "\n";
    for (const auto& [why, n] : result.returned_by_reason)
      std::cerr << "sluice publish: " << n << " returned with " << why << "\n";
    if (result.nacked)
      std::cerr << "sluice publish: " << result.nacked
                << " nacked by the broker (published again while attempts were left)\n";
    if (!result.ok())
      std::cerr << "sluice publish: " << result.returned << " returned (unroutable), "
                << result.failed << " not confirmed\n";
    return result.ok() ? 0 : 1;
  } catch (const AmqpError& e) {
    std::cerr << "sluice publish: --amqp-url: " << e.what() << "\n";
    return e.kind() == AmqpError::Kind::auth ? 2 : 1;
  }
}

std::optional<std::string> check_publish(const PublishFlags& options) {
  try {
    parse_uri(options.url);
  } catch (const std::invalid_argument& e) {
    return std::string("--amqp-url: ") + e.what();
  }
  if (options.exchange.empty() && options.routing_key.empty())
    return "--routing-key: missing (with the default exchange it names the queue)";
  return std::nullopt;
}

}  // namespace

driver::SourceVerbs add_amqp_verbs(const driver::VerbCommands& commands) {
  auto flags = std::make_shared<Flags>();
  auto* pub = commands.publish;
  pub->add_option("--amqp-url", flags->publish.url,
                  "RabbitMQ instead: amqp://user:password@host:port/vhost (or SLUICE_AMQP_URL)")
      ->envname("SLUICE_AMQP_URL");
  pub->add_option("--exchange", flags->publish.exchange,
                  "RabbitMQ exchange (default: the default one)");
  pub->add_option("--routing-key", flags->publish.routing_key,
                  "RabbitMQ routing key (with the default exchange: the queue's name)");

  auto* stats = commands.queue_stats;
  stats
      ->add_option("--amqp-url", flags->stats_url,
                   "RabbitMQ instead: amqp://user:password@host/vhost")
      ->envname("SLUICE_AMQP_URL");
  stats->add_option("--queue", flags->stats_queue, "RabbitMQ queue name");
  stats->add_option("--management-url", flags->management_url,
                    "RabbitMQ: the management plugin (http://host:15672), for unacknowledged "
                    "counts");

  auto* create = commands.queue_create;
  create->add_option("--amqp-url", flags->create_url,
                     "RabbitMQ instead: amqp://user:password@host/vhost");
  create->add_flag("--quorum", flags->create_declaration.quorum, "RabbitMQ: a quorum queue");
  create->add_option("--dead-letter-exchange", flags->create_declaration.dead_letter_exchange,
                     "RabbitMQ: the queue's x-dead-letter-exchange");
  create
      ->add_option(
          "--delivery-limit", flags->create_declaration.delivery_limit,
          "RabbitMQ quorum queue: x-delivery-limit N (a message is delivered at most N + 1 "
          "times, then dead-lettered; source.rabbitmq.delivery_limit says it to sluice "
          "run)")
      ->check(CLI::Range(1, 1000000));
  create->add_flag("--single-active-consumer", flags->create_declaration.single_active_consumer,
                   "RabbitMQ: x-single-active-consumer (one consumer at a time receives: the "
                   "queue is one ordered group)");
  create->add_flag("--stream", flags->create_declaration.stream,
                   "RabbitMQ: a stream (x-queue-type: stream), an append-only log read with "
                   "source.rabbitmq.stream_offset");
  create->add_option("--dead-letter-queue", flags->create_dead_letter_queue,
                     "RabbitMQ: also declare this queue and dead-letter into it (through the "
                     "default exchange: x-dead-letter-routing-key)");

  auto* autoscale = commands.autoscale;
  autoscale
      ->add_option("--amqp-url", flags->autoscale_url,
                   "RabbitMQ instead: amqp://user:password@host/vhost (or SLUICE_AMQP_URL)")
      ->envname("SLUICE_AMQP_URL");
  autoscale->add_option("--queue", flags->autoscale_queue, "RabbitMQ queue name");
  autoscale->add_option("--management-url", flags->autoscale_management_url,
                        "RabbitMQ: the management plugin (http://host:15672): unacknowledged "
                        "messages are the in-flight count");

  driver::SourceVerbs verbs;
  verbs.autoscale = driver::SourceVerbs::Autoscale{
      "--amqp-url (or SLUICE_AMQP_URL) with --queue and --management-url (RabbitMQ)",
      [flags] { return !flags->autoscale_url.empty(); },
      [flags]() -> std::optional<std::string> {
        if (flags->autoscale_queue.empty() || flags->autoscale_management_url.empty())
          return "RabbitMQ: --queue and --management-url are needed (the in-flight count is the "
                 "queue's unacknowledged messages, which only the management API reports)";
        return std::nullopt;
      },
      [flags](boost::asio::any_io_executor executor) -> std::unique_ptr<driver::QueueReader> {
        return std::make_unique<ManagementReader>(std::move(executor), *flags);
      },
      [flags] { return flags->autoscale_queue; },
      [] { return std::optional<driver::QueueMetrics>(); }};
  verbs.publish =
      driver::SourceVerbs::Publish{"--amqp-url (or SLUICE_AMQP_URL) with --routing-key (RabbitMQ)",
                                   [flags] { return !flags->publish.url.empty(); },
                                   [flags] { return check_publish(flags->publish); },
                                   [flags](driver::PublishRequest request) {
                                     return publish(flags->publish, std::move(request));
                                   }};
  verbs.queue_stats = driver::SourceVerbs::Verb{
      "--amqp-url (or SLUICE_AMQP_URL) with --queue (RabbitMQ)",
      [flags] { return !flags->stats_url.empty(); }, false,
      [flags] { return queue_stats(flags->stats_url, flags->stats_queue, flags->management_url); }};
  const std::string* name = commands.queue_name;
  verbs.queue_create = driver::SourceVerbs::Verb{
      "--amqp-url (RabbitMQ)", [flags] { return !flags->create_url.empty(); }, false,
      [flags, name] {
        return queue_create(flags->create_url, *name, flags->create_declaration,
                            flags->create_dead_letter_queue);
      }};
  add_dead_letter_verbs(commands, verbs);
  return verbs;
}

}  // namespace sluice::amqp
