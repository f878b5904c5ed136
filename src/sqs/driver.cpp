// The SQS driver: source.sqs.*, the queue probe (GetQueueAttributes), the figures of
// the SQS source (the billed calls, S3 payloads) and its message properties.
#include "sqs/driver.hpp"

#include <spdlog/spdlog.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <charconv>
#include <future>
#include <iostream>
#include <thread>

#include "common/redact.hpp"
#include "common/thread_name.hpp"
#include "driver/probe_wait.hpp"
#include "sluice/aws/error.hpp"
#include "sluice/aws/http.hpp"
#include "sluice/sqs/client.hpp"
#include "sqs/verbs.hpp"

namespace sluice::sqs {
namespace asio = boost::asio;
using namespace config;
using driver::Check;
using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

namespace {

const char* const kSqsSeconds = "the SQS API takes seconds";

// An http(s) URL whose path names a queue: /ACCOUNT/NAME.
std::string as_queue_url(const Value& n, const std::string& key) {
  const std::string text = as_string(n, key);
  if (text.empty()) return text;
  if (text.find('@') != std::string::npos)
    throw ConfigError(key + ": got '" + common::redact_password(text) +
                      "', expected a queue URL without credentials in it (they come from the AWS "
                      "settings)");
  aws::Url url;
  try {
    url = aws::Url::parse(text);
  } catch (const std::exception&) {
    bad(key, n, "an SQS queue URL such as https://sqs.us-east-1.amazonaws.com/123456789012/orders");
  }
  const auto account_end = url.target.find('/', 1);
  if (url.target.size() < 4 || account_end == std::string::npos || account_end == 1 ||
      account_end + 1 >= url.target.size() ||
      url.target.find_first_of("/?# ", account_end + 1) != std::string::npos)
    bad(key, n,
        "an SQS queue URL whose path is /ACCOUNT/QUEUE_NAME, such as "
        "https://sqs.us-east-1.amazonaws.com/123456789012/orders");
  return text;
}

std::string as_endpoint_url(const Value& n, const std::string& key) {
  const std::string text = as_string(n, key);
  if (text.empty()) return text;
  if (text.find('@') != std::string::npos)
    throw ConfigError(key + ": got '" + common::redact_password(text) +
                      "', expected an endpoint URL without credentials in it");
  try {
    aws::Url::parse(text);
  } catch (const std::exception&) {
    bad(key, n, "an http:// or https:// URL such as http://127.0.0.1:4566");
  }
  return text;
}

std::vector<driver::SourceOption> sqs_options() {
  using driver::option;
  using S = SqsSettings;
  return {
      option<S>(
          "queue_url", "string", "", "The SQS queue URL to drain (required).",
          [](S& s, auto& n, auto& k) { s.source.queue_url = as_queue_url(n, k); },
          "SLUICE_QUEUE_URL"),
      option<S>(
          "region", "string", "", "AWS region; empty: AWS_REGION, AWS_DEFAULT_REGION, the profile.",
          [](S& s, auto& n, auto& k) { s.source.client.region = as_string(n, k); },
          "SLUICE_REGION"),
      option<S>(
          "endpoint_url", "string", "",
          "SQS endpoint, for local emulators; empty: AWS_ENDPOINT_URL_SQS, AWS_ENDPOINT_URL, the "
          "profile, AWS.",
          [](S& s, auto& n, auto& k) { s.source.client.endpoint_url = as_endpoint_url(n, k); },
          "SLUICE_SQS_ENDPOINT"),
      option<S>("fifo", "enum: auto | on | off", "auto",
                "FIFO: each MessageGroupId in order into the sink, groups in parallel. auto: the "
                "queue's FifoQueue attribute (its URL's .fifo if unreadable).",
                [](S& s, auto& n, auto& k) {
                  const std::string f = as_enum(n, k, {"auto", "on", "off"});
                  s.source.fifo = f == "on"    ? FifoMode::on
                                  : f == "off" ? FifoMode::off
                                               : FifoMode::auto_detect;
                }),
      option<S>("max_messages_per_poll", "integer", "10",
                "Messages asked for by one receive (SQS allows 10).",
                [](S& s, auto& n, auto& k) {
                  s.source.max_messages_per_poll = static_cast<int>(as_int(n, k, 1, 10));
                }),
      option<S>("poll_wait", "duration", "20s",
                "Long-poll wait of each receive (SQS allows up to 20s).",
                [](S& s, auto& n, auto& k) {
                  s.source.poll_wait = as_whole_seconds(n, k, seconds(0), seconds(20), kSqsSeconds);
                }),
      option<S>("visibility_timeout", "duration", "30s",
                "Visibility asked for on every receive; extended by the heartbeat while a message "
                "is held.",
                [](S& s, auto& n, auto& k) {
                  s.source.visibility_timeout =
                      as_whole_seconds(n, k, seconds(1), seconds(43200), kSqsSeconds);
                }),
      option<S>("delete_batch_size", "integer", "10",
                "Deletes (acks) are sent in batches of this many (SQS allows 10) ...",
                [](S& s, auto& n, auto& k) {
                  s.source.delete_batch_size = static_cast<int>(as_int(n, k, 1, 10));
                }),
      option<S>("delete_flush_interval", "duration", "100ms",
                "... or after this long; so are visibility changes. Always flushed on stop.",
                [](S& s, auto& n, auto& k) {
                  s.source.delete_flush_interval = as_duration(n, k, milliseconds(1), seconds(10));
                }),
      option<S>(
          "dead_letter_queue_url", "string", "",
          "SQS queue for rejected messages: the body, the reason and the original message "
          "attributes as String values (Binary ones base64), as many as fit in SQS's 10 beside "
          "Sluice's three; empty: none (the queue's own redrive policy takes them).",
          [](S& s, auto& n, auto& k) { s.source.dead_letter_queue_url = as_queue_url(n, k); },
          "SLUICE_DEAD_LETTER_QUEUE_URL"),
      option<S>("large_payloads.enabled", "boolean", "false",
                "Bodies the AWS extended clients stored in S3 (an S3 pointer with the "
                "ExtendedPayloadSize attribute) are fetched before decode; the pipeline sees the "
                "real body (decode.max_body_bytes then defaults to max_bytes_in_flight, at most "
                "1 GiB).",
                [](S& s, auto& n, auto& k) { s.source.large_payloads.enabled = as_bool(n, k); }),
      option<S>("large_payloads.max_bytes_in_flight", "integer", "268435456",
                "Payload bytes held at once; a handler call waits for room. A payload larger than "
                "this is rejected with reason payload_too_large.",
                [](S& s, auto& n, auto& k) {
                  s.source.large_payloads.max_bytes_in_flight =
                      static_cast<std::uint64_t>(as_int(n, k, 1, 1LL << 40));
                }),
      option<S>(
          "large_payloads.delete_after_ack", "boolean", "false",
          "Delete each S3 object once its message is deleted from the queue (off by "
          "default, as in the Java extended client).",
          [](S& s, auto& n, auto& k) { s.source.large_payloads.delete_after_ack = as_bool(n, k); }),
      option<S>(
          "large_payloads.region", "string", "", "The buckets' region; empty: the queue's.",
          [](S& s, auto& n, auto& k) { s.source.large_payloads.s3.region = as_string(n, k); }),
      option<S>(
          "large_payloads.endpoint_url", "string", "",
          "S3 endpoint, for local emulators; empty: AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the "
          "profile, AWS.",
          [](S& s, auto& n, auto& k) {
            s.source.large_payloads.s3.endpoint_url = as_endpoint_url(n, k);
          },
          "SLUICE_S3_ENDPOINT"),
      option<S>("large_payloads.addressing", "enum: auto | path | virtual", "auto",
                "S3 addressing: auto is virtual-hosted on AWS's endpoints for host-safe bucket "
                "names, path-style elsewhere (emulators).",
                [](S& s, auto& n, auto& k) {
                  const std::string a = as_enum(n, k, {"auto", "path", "virtual"});
                  s.source.large_payloads.s3.addressing = a == "path" ? s3::AddressingStyle::path
                                                          : a == "virtual"
                                                              ? s3::AddressingStyle::virtual_hosted
                                                              : s3::AddressingStyle::auto_detect;
                }),
  };
}

// GetQueueAttributes on a thread of its own.
class SqsQueueProbe final : public driver::QueueProbe {
 public:
  explicit SqsQueueProbe(const SqsSourceOptions& options) : options_(options) {
    try {
      client_.emplace(io_.get_executor(), options_.client);
    } catch (const aws::AwsError& e) {
      throw ConfigError(std::string("source.sqs: ") + e.what());
    }
  }
  ~SqsQueueProbe() override { stop(); }

  int check_at_start(bool wait_for_queue, const std::function<bool()>& signalled) override {
    const Check queue = check(options_.queue_url, signalled);
    const Check dead_letters = queue == Check::interrupted || options_.dead_letter_queue_url.empty()
                                   ? Check::unknown
                                   : check(options_.dead_letter_queue_url, signalled);
    if (queue == Check::interrupted || dead_letters == Check::interrupted) return -1;
    if (queue == Check::missing && !wait_for_queue) {
      std::cerr << "sluice: source.sqs.queue_url (SLUICE_QUEUE_URL): the queue "
                << options_.queue_url
                << " does not exist (set source.wait_for_queue: true to wait for it)\n";
      return 2;
    }
    if (dead_letters == Check::missing) {
      std::cerr << "sluice: source.sqs.dead_letter_queue_url (SLUICE_DEAD_LETTER_QUEUE_URL): the "
                   "queue "
                << options_.dead_letter_queue_url << " does not exist\n";
      return 2;
    }
    return 0;
  }

  void start(driver::QueueCounts& counts) override {
    asio::co_spawn(
        io_,
        [this, &counts]() -> asio::awaitable<void> {
          asio::steady_timer timer(io_);
          bool dead_letters_failing = false;
          for (int round = 0;; ++round) {
            try {
              const auto attrs = co_await client_->get_queue_attributes(options_.queue_url);
              counts.ready = std::stol(attrs.at("ApproximateNumberOfMessages"));
              counts.in_flight = std::stol(attrs.at("ApproximateNumberOfMessagesNotVisible"));
              counts.read_at_ns = Clock::now().time_since_epoch().count();
            } catch (const std::exception& e) {
              spdlog::debug("event=queue_stats_failed error=\"{}\"", e.what());
            }
            // The dead-letter queue every 5 s: for the alert, not the drain check. A
            // reading that fails (sqs:GetQueueAttributes refused on it) is said once per
            // streak and the gauge goes (-1: no series) rather than keep an old count.
            if (!options_.dead_letter_queue_url.empty() && round % 10 == 0) {
              try {
                const auto dead =
                    co_await client_->get_queue_attributes(options_.dead_letter_queue_url);
                counts.dead_letters = std::stol(dead.at("ApproximateNumberOfMessages")) +
                                      std::stol(dead.at("ApproximateNumberOfMessagesNotVisible"));
                dead_letters_failing = false;
              } catch (const std::exception& e) {
                counts.dead_letters = -1;
                if (!dead_letters_failing)
                  spdlog::warn("event=dead_letter_stats_failed queue={} error=\"{}\"",
                               options_.dead_letter_queue_url, e.what());
                dead_letters_failing = true;
              }
            }
            timer.expires_after(milliseconds(500));
            co_await timer.async_wait(asio::use_awaitable);
          }
        },
        asio::detached);
    thread_ = std::thread([this] {
      common::name_this_thread("sluice-probe");
      io_.run();
    });
  }

  void stop() override {
    io_.stop();
    if (thread_.joinable()) thread_.join();
  }

 private:
  Check check(const std::string& url, const std::function<bool()>& signalled) {
    try {
      auto result = asio::co_spawn(io_, client_->get_queue_attributes(url), asio::use_future);
      const Check waited = driver::wait_for_check(
          [&](milliseconds slice) {
            io_.restart();
            io_.run_for(slice);
            return result.wait_for(seconds(0)) == std::future_status::ready;
          },
          signalled);
      io_.restart();
      if (waited == Check::unknown)
        spdlog::warn("event=queue_check_timeout queue={} waited_s=15 action=continue", url);
      if (waited != Check::exists) return waited;
      result.get();
      return Check::exists;
    } catch (const aws::AwsError& e) {
      if (e.code() == "QueueDoesNotExist" || e.code().ends_with("NonExistentQueue"))
        return Check::missing;
      spdlog::warn("event=queue_check_failed queue={} error=\"{}\" action=continue", url, e.what());
    } catch (const std::exception& e) {
      spdlog::warn("event=queue_check_failed queue={} error=\"{}\" action=continue", url, e.what());
    }
    return Check::unknown;
  }

  const SqsSourceOptions options_;
  asio::io_context io_;
  std::optional<SqsClient> client_;
  std::thread thread_;
};

class SqsDriver final : public driver::DriverOf<SqsSettings> {
 public:
  std::string_view name() const override { return "sqs"; }
  std::string_view doc() const override {
    return "Amazon SQS (and SQS-compatible emulators), standard and FIFO queues, over the JSON "
           "1.0 protocol. Credentials and region come from the usual AWS places (environment, "
           "shared files and profiles, web identity, ECS, EC2 instance metadata).";
  }
  const std::vector<driver::SourceOption>& options() const override {
    static const auto table = sqs_options();
    return table;
  }
  std::vector<std::pair<std::string, std::string>> renamed_keys() const override {
    std::vector<std::pair<std::string, std::string>> renamed;
    for (const auto& o : options()) renamed.emplace_back("source." + o.key, o.key);
    // source.dead_letter_queue_url was never a key: the old one was dead_letter.queue_url.
    std::erase_if(renamed, [](const auto& r) { return r.second == "dead_letter_queue_url"; });
    renamed.emplace_back("dead_letter.queue_url", "dead_letter_queue_url");
    return renamed;
  }

  void finalize(driver::SourceSettings& settings, driver::PipelineSettings& p) const override {
    auto& o = of(settings).source;
    if (o.queue_url.empty())
      throw ConfigError(
          "source.sqs.queue_url: missing, expected an SQS queue URL (source.type is sqs)");
    // Fetched payloads are the bodies decode sees: by default it takes what the budget
    // can hold.
    if (o.large_payloads.enabled && !p.max_body_bytes_set)
      p.max_body_bytes = static_cast<std::size_t>(
          std::min<std::uint64_t>(o.large_payloads.max_bytes_in_flight, 1u << 30));
    try {
      validate(o);
    } catch (const OptionError& e) {
      throw_as_config_error(e, "source.sqs.");
    }
    // Only a FIFO queue's messages carry the producer's deduplication id: on a standard
    // queue every message would be rejected for the want of one.
    if (p.identity_from_deduplication_id &&
        (o.fifo == FifoMode::off ||
         (o.fifo == FifoMode::auto_detect && !o.queue_url.ends_with(".fifo"))))
      throw ConfigError(
          "identity.key: deduplication_id: the queue " + o.queue_url +
          (o.fifo == FifoMode::off
               ? std::string(" is read as a standard queue (source.sqs.fifo is off)")
               : std::string(" is a standard queue (its name does not end in .fifo)")) +
          ", whose messages carry no deduplication id: use identity.key: content, or a FIFO "
          "queue (source.sqs.fifo: on if this URL names one under another name)");
    // The measured better setting for SQS (BENCHMARKS.md): the same rate on a full standard
    // queue, fewer requests and a faster drain on a FIFO queue whose groups are mostly busy.
    // Not when the MIN-MAX scaler's triggers are tuned: auto would silently ignore them.
    if (!p.concurrency_set && !p.receive_scaler_set) parse_concurrency("auto", p.container);
    // Auto's real bound (the one intake applies to receives of 10), as /metrics, sluice
    // plan and the start line report it.
    if (p.container.auto_concurrency)
      p.container.max_concurrent_receives = max_auto_receives(p.container.max_in_flight, 10);
    // A heartbeat that comes less often than half the visibility can let a held
    // message reappear: refused here rather than corrected at run time.
    if (p.container.heartbeat && p.container.heartbeat_interval.count() > 0 &&
        p.container.heartbeat_interval * 2 > o.visibility_timeout)
      throw ConfigError("source.heartbeat_interval: got " +
                        std::to_string(p.container.heartbeat_interval.count()) +
                        "ms, expected at most half of source.sqs.visibility_timeout (" +
                        std::to_string(o.visibility_timeout.count()) + "s)");
  }

  SourceFactory factory(const driver::SourceSettings& s) const override {
    return make_sqs_source(of(s).source);
  }
  std::unique_ptr<driver::QueueProbe> probe(const driver::SourceSettings& s) const override {
    return std::make_unique<SqsQueueProbe>(of(s).source);
  }

  const std::vector<driver::SourceFigure>& figures() const override {
    using K = driver::SourceFigure::Kind;
    static const std::vector<driver::SourceFigure> table = {
        {"sqs_receive_requests", K::total,
         "ReceiveMessage calls (what SQS bills, with the two below)"},
        {"sqs_delete_requests", K::total, "DeleteMessageBatch calls"},
        {"sqs_change_visibility_requests", K::total,
         "ChangeMessageVisibilityBatch calls (heartbeat, retries, releases)"},
        {"large_payload_bytes_held", K::gauge,
         "Bytes of S3 payloads held by messages not yet settled"},
        {"large_payloads_fetched", K::total,
         "S3 payloads fetched (extended-client pointers resolved)", false, "S3 payloads fetched"},
        {"large_payload_bytes_fetched", K::total, "Bytes of S3 payloads fetched", false,
         "S3 payload bytes fetched"},
        {"large_payloads_missing", K::total,
         "S3 payloads missing (their messages rejected: payload_missing)"},
        {"large_payload_fetch_failures", K::total,
         "S3 payload fetches that failed (their messages retried)"},
        {"large_payload_waits", K::total,
         "Handler calls that waited for room in max_bytes_in_flight before their payloads were "
         "fetched"},
        {"large_payloads_deleted", K::total,
         "S3 payloads deleted after their message (delete_after_ack)"},
    };
    return table;
  }
  bool dead_letters(const driver::SourceSettings& s) const override {
    return !of(s).source.dead_letter_queue_url.empty();
  }

  std::vector<std::pair<std::string, std::string>> reject_reasons() const override {
    return {{"payload_missing",
             "with `source.sqs.large_payloads`: the S3 object a message points to is gone"},
            {"payload_too_large",
             "with `source.sqs.large_payloads`: the payload is larger than "
             "`source.sqs.large_payloads.max_bytes_in_flight`"}};
  }
  std::string_view header_key() const override { return "attribute"; }
  std::vector<std::string> meta_fields() const override {
    return {"sent_time", "group_id", "sequence_number", "deduplication_id"};
  }
  driver::MessageMeta read_meta(const sluice::Message& m) const override {
    driver::MessageMeta meta;
    meta.sent_time = driver::epoch_ms_attribute(m, "SentTimestamp");
    meta.group_id = m.attribute("MessageGroupId");
    meta.sequence_number = m.attribute("SequenceNumber");
    meta.deduplication_id = m.attribute("MessageDeduplicationId");
    return meta;
  }

  std::string describe(const driver::SourceSettings& s, const ContainerOptions& c) const override {
    return "sqs " + of(s).source.queue_url + " (receives " +
           (c.auto_concurrency
                ? "auto, at most " + std::to_string(max_auto_receives(c.max_in_flight, 10))
                : std::to_string(c.min_concurrent_receives) + "-" +
                      std::to_string(c.max_concurrent_receives)) +
           ", max_in_flight " + std::to_string(c.max_in_flight) + ")";
  }
  std::string queue_name(const driver::SourceSettings& s) const override {
    return of(s).source.queue_url;
  }
  std::vector<std::pair<std::string, double>> plan_settings(
      const driver::SourceSettings& s) const override {
    return {{"visibility_timeout_seconds",
             static_cast<double>(of(s).source.visibility_timeout.count())}};
  }
  void add_verbs(const driver::VerbCommands& commands, driver::SourceVerbs& verbs) const override {
    verbs = add_sqs_verbs(commands);
  }
};

}  // namespace

const driver::SourceDriver& sqs_source_driver() {
  static const SqsDriver driver;
  return driver;
}

}  // namespace sluice::sqs
