// The RabbitMQ driver: source.rabbitmq.*, the queue probe (a passive queue.declare on a
// connection of its own), the figures of the AMQP source and its message properties.
#include "amqp/driver.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <condition_variable>
#include <future>
#include <iostream>
#include <mutex>
#include <string_view>
#include <thread>

#include "amqp/connection.hpp"
#include "amqp/stream.hpp"
#include "amqp/verbs.hpp"
#include "common/redact.hpp"
#include "common/thread_name.hpp"
#include "driver/probe_wait.hpp"

namespace sluice::amqp {
using namespace config;
using driver::Check;
using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

namespace {

std::vector<driver::SourceOption> amqp_options() {
  using driver::option;
  using S = AmqpSettings;
  return {
      option<S>(
          "url", "string", "amqp://guest:guest@127.0.0.1:5672/%2f",
          "amqp://user:password@host:port/vhost (amqps:// for TLS; %2f is the vhost /).",
          [](S& s, auto& n, auto& k) {
            const std::string text = as_string(n, k);
            try {
              parse_uri(text);
            } catch (const std::invalid_argument& e) {
              throw RedactedConfigError(k + ": " + e.what());  // shows the URI redacted
            }
            s.source.uri = text;
          },
          "SLUICE_AMQP_URL", true),
      option<S>(
          "queue", "string", "", "The queue to consume (required).",
          [](S& s, auto& n, auto& k) {
            s.source.queue = as_string(n, k);
            if (s.source.queue.size() > 255) bad(k, n, "a queue name of at most 255 bytes");
          },
          "SLUICE_AMQP_QUEUE"),
      option<S>("prefetch", "integer", "250",
                "Unacknowledged deliveries per consumer (basic.qos): max(prefetch, batch_size), at "
                "most max_in_flight / MAX consumers, so the broker never has more than "
                "max_in_flight out.",
                [](S& s, auto& n, auto& k) {
                  s.source.prefetch = static_cast<int>(as_int(n, k, 1, 65535));
                }),
      option<S>("batch_size", "integer", "1",
                "Deliveries that end a consumer's cycle (Spring's batchSize; see "
                "docs/rabbitmq.md).",
                [](S& s, auto& n, auto& k) {
                  s.source.batch_size = static_cast<int>(as_int(n, k, 1, 65535));
                }),
      option<S>("receive_timeout", "duration", "1s",
                "A consumer's cycle ends after this long without a delivery.",
                [](S& s, auto& n, auto& k) {
                  s.source.receive_timeout = as_duration(n, k, milliseconds(10), seconds(3600));
                }),
      option<S>("consecutive_active_trigger", "integer", "10",
                "A consumer active this many cycles in a row starts another (up to MAX).",
                [](S& s, auto& n, auto& k) {
                  s.source.consecutive_active_trigger = static_cast<int>(as_int(n, k, 1, 100000));
                }),
      option<S>("consecutive_idle_trigger", "integer", "10",
                "A consumer idle this many cycles in a row stops (down to MIN).",
                [](S& s, auto& n, auto& k) {
                  s.source.consecutive_idle_trigger = static_cast<int>(as_int(n, k, 1, 100000));
                }),
      option<S>("start_consumer_min_interval", "duration", "10s",
                "At least this long between two consumers started.",
                [](S& s, auto& n, auto& k) {
                  s.source.start_consumer_min_interval =
                      as_duration(n, k, milliseconds(0), seconds(86400));
                }),
      option<S>("stop_consumer_min_interval", "duration", "60s",
                "At least this long between two consumers stopped.",
                [](S& s, auto& n, auto& k) {
                  s.source.stop_consumer_min_interval =
                      as_duration(n, k, milliseconds(0), seconds(86400));
                }),
      option<S>("recovery_interval", "duration", "5s",
                "A lost connection or consumer is recovered after 500ms, doubling up to this, each "
                "wait jittered between half and all of it.",
                [](S& s, auto& n, auto& k) {
                  s.source.recovery_interval = as_duration(n, k, milliseconds(100), seconds(3600));
                }),
      option<S>("retry_hold_max", "duration", "5m",
                "A failed message is held (unacknowledged) for its backoff, at most this long "
                "and at most half of consumer_timeout (warned at start), then returned with "
                "basic.reject (requeue).",
                [](S& s, auto& n, auto& k) {
                  s.source.retry_hold_max = as_duration(n, k, milliseconds(0), seconds(86400));
                }),
      option<S>("consumer_timeout", "duration", "30m",
                "The broker's consumer_timeout (rabbitmq.conf) or the queue's x-consumer-timeout, "
                "which AMQP cannot read: caps retry holds; 0s: the broker has none. A channel the "
                "broker closes for a delivery held longer is recognized, counted "
                "(sluice_amqp_consumer_timeouts_total) and recovered whatever this says.",
                [](S& s, auto& n, auto& k) {
                  s.source.consumer_timeout =
                      as_duration(n, k, milliseconds(0), std::chrono::hours(24 * 365));
                }),
      option<S>("heartbeat", "duration", "60s",
                "The connection heartbeat asked for (whole seconds; 0s: none); a broker silent "
                "for two of them is taken for lost.",
                [](S& s, auto& n, auto& k) {
                  s.source.heartbeat =
                      as_whole_seconds(n, k, seconds(0), seconds(65535), "AMQP counts seconds");
                }),
      option<S>("connection_name", "string", "sluice",
                "The connection's name as the broker shows it.",
                [](S& s, auto& n, auto& k) { s.source.connection_name = as_string(n, k); }),
      option<S>("ca_file", "string", "",
                "Over amqps://: the CA certificates (PEM) that signed the broker's; empty: the "
                "system's.",
                [](S& s, auto& n, auto& k) { s.source.ca_file = as_file_path_or_empty(n, k); }),
      option<S>("verify_hostname", "boolean", "true",
                "Over amqps://: the broker's certificate must name the URL's host.",
                [](S& s, auto& n, auto& k) { s.source.verify_hostname = as_bool(n, k); }),
      option<S>("dead_letter_exchange", "boolean", "false",
                "The queue has an x-dead-letter-exchange: rejected messages go there "
                "(basic.reject without requeue) as well as to the rejects table. false: they are "
                "kept in the rejects table and acked.",
                [](S& s, auto& n, auto& k) { s.dead_letter_exchange = as_bool(n, k); }),
      option<S>("delivery_limit", "integer", "0",
                "The quorum queue's x-delivery-limit (0: none known): a message is delivered at "
                "most limit + 1 times, its (limit + 1)th return dead-letters it (before RabbitMQ "
                "4.3 any return counts; from 4.3 failures only, which Sluice sends as "
                "basic.reject with requeue). "
                "sink.max_record_failures is lowered to delivery_limit + 1 (an error when set "
                "higher), so that Sluice rejects a failing record, with its reason, first.",
                [](S& s, auto& n, auto& k) {
                  s.delivery_limit = static_cast<int>(as_int(n, k, 0, 1000000));
                }),
      option<S>("single_active_consumer", "boolean", "false",
                "The queue is a single-active-consumer queue (x-single-active-consumer; `sluice "
                "queue create --single-active-consumer`): its messages are one ordered group, "
                "written in the queue's order across instances (only the active consumer "
                "receives). One consumer (source.concurrency 1); after a failure or a release "
                "the held deliveries go back in order and come again (docs/rabbitmq.md). "
                "Sluice cannot read the queue's arguments over AMQP: say it here.",
                [](S& s, auto& n, auto& k) { s.source.single_active_consumer = as_bool(n, k); }),
      option<S>("stream_offset", "string", "",
                "The queue is a stream (x-queue-type: stream; `sluice queue create --stream`), "
                "read from here the first time: first, last, next, an offset (12345) or a UTC "
                "time (2026-12-01T08:00:00Z). Empty: not a stream. The broker keeps no position "
                "for AMQP 0-9-1 consumers: Sluice saves the last offset written (with every one "
                "before it) in the sink's database (sluice_positions: in each batch's own "
                "transaction on PostgreSQL and SQLite, and apart about every second and at a "
                "stop) and resumes after it; after a crash PostgreSQL and SQLite read nothing "
                "twice (handlers inline, the default), MongoDB reads again what came after, which "
                "the content hash stores "
                "once. One consumer (source.concurrency 1); a "
                "failure re-reads the stream from the oldest message not yet written; rejects "
                "are kept in the rejects table (a stream dead-letters nothing). See "
                "docs/rabbitmq.md.",
                [](S& s, auto& n, auto& k) { s.source.stream_offset = as_string(n, k); }),
  };
}

std::unique_ptr<Connection> connect(const AmqpSourceOptions& options, const std::string& suffix) {
  ConnectionOptions o;
  o.uri = parse_uri(options.uri);
  o.connection_name = options.connection_name + suffix;
  o.ca_file = options.ca_file;
  o.verify_hostname = options.verify_hostname;
  o.heartbeat = seconds(0);  // short calls; a dead peer fails them
  o.rpc_timeout = seconds(5);
  o.connect_timeout = seconds(5);
  return std::make_unique<Connection>(o);
}

// A connection of its own, a passive queue.declare (the ready count; AMQP does not
// report unacknowledged counts: the container's own are used).
class AmqpQueueProbe final : public driver::QueueProbe {
 public:
  explicit AmqpQueueProbe(const AmqpSourceOptions& options) : options_(options) {}
  ~AmqpQueueProbe() override { stop(); }

  int check_at_start(bool wait_for_queue, const std::function<bool()>& signalled) override {
    auto result = std::make_shared<std::promise<int>>();
    auto future = result->get_future();
    // Detached: a broker that never answers must not hold the exit (connect and call
    // timeouts end it within 40 s at most; it touches only what it owns).
    std::thread([options = options_, result] {
      common::name_this_thread("sluice-check");
      try {
        auto connection = connect(options, "-check");
        connection->open_channel(1);
        connection->inspect_queue(1, options.queue);
        // Reading needs its own permission: a consumer (prefetch 1) proves it. A message
        // it may take is requeued when this connection closes, unharmed. Not on a
        // single-active-consumer queue: the check could become the active consumer and
        // take the head, which a quorum queue then returns behind other returned messages
        // (the source's own consume reports a refused read there).
        // A stream's consume names where to start (from its end here: nothing is taken);
        // a queue that is not a stream refuses that argument.
        if (!options.single_active_consumer) {
          connection->qos(1, 1, false);
          amqp_table_entry_t from{};
          if (!options.stream_offset.empty())
            stream_offset_argument({StreamStart::Kind::next, 0}, from);
          const amqp_table_t arguments =
              options.stream_offset.empty() ? amqp_empty_table : amqp_table_t{1, &from};
          connection->cancel(1, connection->consume(1, options.queue, "sluice-check", arguments));
        }
        result->set_value(0);
      } catch (const AmqpError& e) {
        if (e.reply_code() == 406 &&
            std::string_view(e.what()).find("x-stream-offset") != std::string_view::npos) {
          std::cerr << "sluice: source.rabbitmq.stream_offset: the queue '" << options.queue
                    << "' is not a stream (x-queue-type: stream), so it cannot be read from an "
                       "offset; remove the option, or read a stream\n";
          result->set_value(403);  // said: exit 2
          return;
        }
        // Said before the answer: the main thread may exit as soon as it has it.
        const bool refused = e.kind() == AmqpError::Kind::auth || e.reply_code() == 403;
        const bool tls = e.kind() == AmqpError::Kind::tls;
        if (refused)
          std::cerr << "sluice: source.rabbitmq.url (SLUICE_AMQP_URL): " << e.what() << "\n";
        else if (tls)
          std::cerr << "sluice: source.rabbitmq.url (SLUICE_AMQP_URL) / source.rabbitmq.ca_file: "
                    << e.what() << "\n";
        else if (!e.not_found())
          spdlog::warn("event=queue_check_failed error=\"{}\" action=continue", e.what());
        result->set_value(e.not_found() ? 404 : refused || tls ? 403 : 1);
      }
    }).detach();
    const Check waited = driver::wait_for_check(
        [&](milliseconds slice) { return future.wait_for(slice) == std::future_status::ready; },
        signalled);
    if (waited == Check::interrupted) return -1;
    if (waited == Check::unknown) {
      spdlog::warn("event=queue_check_timeout queue={} waited_s=15 action=continue",
                   options_.queue);
      return 0;
    }
    const int code = future.get();
    if (code == 403) return 2;  // refused login or reading, a TLS failure: said above
    if (code == 404 && !wait_for_queue) {
      std::cerr << "sluice: source.rabbitmq.queue (SLUICE_AMQP_QUEUE): the queue '"
                << options_.queue << "' does not exist on " << parse_uri(options_.uri).host
                << " (set source.wait_for_queue: true to wait for it)\n";
      return 2;
    }
    return 0;
  }

  void start(driver::QueueCounts& counts) override {
    thread_ = std::thread([this, &counts] {
      common::name_this_thread("sluice-probe");
      std::unique_ptr<Connection> connection;
      std::unique_lock lock(mutex_);
      while (!stopping_) {
        lock.unlock();
        try {
          if (!connection) {
            connection = connect(options_, "-stats");
            connection->open_channel(1);
          }
          const auto info = connection->inspect_queue(1, options_.queue);
          counts.ready = static_cast<long>(info.messages);
          counts.in_flight = -1;  // not said over AMQP
          counts.read_at_ns = Clock::now().time_since_epoch().count();
        } catch (const AmqpError& e) {
          spdlog::debug("event=queue_stats_failed error=\"{}\"", e.what());
          connection.reset();
        }
        lock.lock();
        wake_.wait_for(lock, milliseconds(500), [&] { return stopping_; });
      }
    });
  }

  void stop() override {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  const AmqpSourceOptions options_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

class AmqpDriver final : public driver::DriverOf<AmqpSettings> {
 public:
  std::string_view name() const override { return "rabbitmq"; }
  std::string_view doc() const override {
    return "A RabbitMQ queue over AMQP 0-9-1 (classic or quorum), with elastic consumers as "
           "Spring AMQP's listener container has them (see docs/rabbitmq.md).";
  }
  const std::vector<driver::SourceOption>& options() const override {
    static const auto table = amqp_options();
    return table;
  }
  std::vector<std::pair<std::string, std::string>> renamed_keys() const override {
    std::vector<std::pair<std::string, std::string>> renamed;
    for (const auto& o : options())
      // Keys newer than the move to source.rabbitmq.* never had a flat name.
      if (o.key != "url" && o.key != "heartbeat" && o.key != "consumer_timeout" &&
          o.key != "delivery_limit" && o.key != "single_active_consumer" &&
          o.key != "stream_offset")
        renamed.emplace_back("source." + o.key, o.key);
    renamed.emplace_back("source.amqp_url", "url");
    renamed.emplace_back("source.amqp_heartbeat", "heartbeat");
    return renamed;
  }

  void finalize(driver::SourceSettings& settings, driver::PipelineSettings& p) const override {
    auto& o = of(settings).source;
    auto& c = p.container;
    if (o.queue.empty())
      throw ConfigError(
          "source.rabbitmq.queue: missing, expected the RabbitMQ queue's name (source.type is "
          "rabbitmq)");
    // Spring's concurrency: consumers. The container's own receive loop is single:
    // a push source's receive only takes what has arrived.
    const bool stream = !o.stream_offset.empty();
    if (o.single_active_consumer || stream) {
      if (p.concurrency_set && !c.auto_concurrency && c.max_concurrent_receives > 1)
        throw ConfigError(
            "source.concurrency: got " +
            (c.min_concurrent_receives == c.max_concurrent_receives
                 ? std::to_string(c.max_concurrent_receives)
                 : std::to_string(c.min_concurrent_receives) + "-" +
                       std::to_string(c.max_concurrent_receives)) +
            (stream ? ", expected 1 with source.rabbitmq.stream_offset (each consumer of a stream "
                      "reads all of it; auto means 1 there)"
                    : ", expected 1 with source.rabbitmq.single_active_consumer (only one "
                      "consumer of such a queue receives; auto means 1 there)"));
      if (stream && o.single_active_consumer)
        throw ConfigError(
            "source.rabbitmq.single_active_consumer: got true, expected false with "
            "source.rabbitmq.stream_offset (over AMQP 0-9-1 a stream has no single active "
            "consumer)");
      if (stream && of(settings).dead_letter_exchange)
        throw ConfigError(
            "source.rabbitmq.dead_letter_exchange: got true, expected false with "
            "source.rabbitmq.stream_offset (a stream dead-letters nothing: rejects are kept in "
            "the rejects table)");
      if (stream && of(settings).delivery_limit > 0)
        throw ConfigError("source.rabbitmq.delivery_limit: got " +
                          std::to_string(of(settings).delivery_limit) +
                          ", expected 0 with source.rabbitmq.stream_offset (a stream has none)");
      c.min_concurrent_receives = c.max_concurrent_receives = 1;
    } else if (c.auto_concurrency) {
      c.max_concurrent_receives = std::clamp(c.max_in_flight / std::max(1, o.prefetch), 1, 64);
    }
    o.min_consumers = c.min_concurrent_receives;
    o.max_consumers = c.max_concurrent_receives;
    if (o.max_consumers > c.max_in_flight)
      throw ConfigError("source.concurrency: got " + std::to_string(o.max_consumers) +
                        " consumers at most, expected at most source.max_in_flight (" +
                        std::to_string(c.max_in_flight) +
                        "): each consumer holds at least one delivery");
    if (o.retry_hold_max < c.failure_backoff_base) c.failure_backoff_base = o.retry_hold_max;
    // The broker gives a message at most delivery_limit + 1 deliveries: Sluice refuses a
    // record that keeps failing on its last one at the latest, so that the rejects table
    // has it with its reason rather than the broker's x-death alone.
    if (const int limit = of(settings).delivery_limit;
        limit > 0 && p.max_record_failures > limit + 1) {
      const int deliveries = limit + 1;
      if (p.max_record_failures_set)
        throw ConfigError("sink.max_record_failures: got " + std::to_string(p.max_record_failures) +
                          ", expected at most " + std::to_string(deliveries) +
                          " with source.rabbitmq.delivery_limit " + std::to_string(limit) +
                          " (the broker dead-letters a message after " +
                          std::to_string(deliveries) +
                          " deliveries, without the reason Sluice stores with a reject)");
      p.max_record_failures = deliveries;
    }
    try {
      validate(o);
    } catch (const OptionError& e) {
      // The URL is never shown (it may hold a password): the parser's words name it
      // redacted.
      if (e.option() == "uri") throw ConfigError("source.rabbitmq.url: " + e.expected());
      throw_as_config_error(e, "source.rabbitmq.",
                            {{"min_consumers", "source.concurrency (MIN)"},
                             {"max_consumers", "source.concurrency (MAX)"}});
    }
  }

  SourceFactory factory(const driver::SourceSettings& s) const override {
    return make_amqp_source(of(s).source);
  }
  std::unique_ptr<driver::QueueProbe> probe(const driver::SourceSettings& s) const override {
    return std::make_unique<AmqpQueueProbe>(of(s).source);
  }

  const std::vector<driver::SourceFigure>& figures() const override {
    using K = driver::SourceFigure::Kind;
    static const std::vector<driver::SourceFigure> table = {
        {"amqp_consumers", K::gauge, "RabbitMQ consumers running (each on its own channel)"},
        {"amqp_connection_blocked", K::gauge,
         "1 while the broker blocks the connection (connection.blocked: memory or disk alarm)"},
        {"amqp_unacknowledged", K::gauge,
         "RabbitMQ deliveries held unacknowledged (handled, waiting out a retry's backoff, or "
         "acked and not yet sent)",
         true},
        {"amqp_connection_recoveries", K::total, "RabbitMQ connections opened again after a loss"},
        {"amqp_connections_lost", K::total,
         "RabbitMQ connections lost (closed by the broker, network, missed heartbeats)"},
        {"amqp_ack_frames", K::total, "basic.ack frames sent (multiple=true covers many messages)"},
        {"amqp_failed_returns", K::total,
         "RabbitMQ deliveries returned as failed after their retry backoff (basic.reject with "
         "requeue: counted toward a quorum queue's x-delivery-limit)"},
        {"amqp_unprocessed_returns", K::total,
         "RabbitMQ deliveries returned unprocessed (basic.nack with requeue: released, or not "
         "handed out at a stop; from RabbitMQ 4.3 not counted toward x-delivery-limit)"},
        {"amqp_consumer_timeouts", K::total,
         "RabbitMQ channels the broker closed because a delivery stayed unacknowledged past its "
         "consumer_timeout (what they held came back from the queue)"},
        {"amqp_rewinds", K::total,
         "Single-active-consumer and stream rewinds: after a failure (its backoff) or a "
         "release, the channel closed so that its held messages come again (a stream: read "
         "again from the oldest not yet written)"},
        {"amqp_stream_offset", K::gauge,
         "A stream's last offset written along with every one before it (what is saved in "
         "sluice_positions; a restart resumes after it)"},
        {"amqp_stream_redeliveries", K::total,
         "Stream deliveries of offsets this process had received before (read again after a "
         "rewind or a connection recovery)"},
    };
    return table;
  }
  bool dead_letters(const driver::SourceSettings& s) const override {
    return of(s).dead_letter_exchange;
  }

  std::vector<std::string> meta_fields() const override { return {"sent_time"}; }
  std::string_view header_key() const override { return "header"; }
  driver::MessageMeta read_meta(const Message& m) const override {
    driver::MessageMeta meta;
    // The AMQP timestamp property (seconds), as the source puts it (milliseconds).
    meta.sent_time = driver::epoch_ms_attribute(m, "SentTimestamp");
    return meta;
  }

  std::string describe(const driver::SourceSettings& s, const ContainerOptions& c) const override {
    const auto& o = of(s).source;
    return "rabbitmq " + common::redact_password(o.uri) +
           (o.stream_offset.empty() ? " queue " : " stream ") + o.queue +
           (o.stream_offset.empty() ? "" : " from " + o.stream_offset + " or its saved position") +
           " (consumers " + std::to_string(o.min_consumers) + "-" +
           std::to_string(o.max_consumers) + ", prefetch " + std::to_string(o.prefetch) +
           ", max_in_flight " + std::to_string(c.max_in_flight) + ")";
  }
  std::string queue_name(const driver::SourceSettings& s) const override {
    return of(s).source.queue;
  }
  void add_verbs(const driver::VerbCommands& commands, driver::SourceVerbs& verbs) const override {
    verbs = add_amqp_verbs(commands);
  }
};

}  // namespace

const driver::SourceDriver& amqp_source_driver() {
  static const AmqpDriver driver;
  return driver;
}

}  // namespace sluice::amqp
