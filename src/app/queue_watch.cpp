#include "app/queue_watch.hpp"

#include <spdlog/spdlog.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_future.hpp>
#include <condition_variable>
#include <future>
#include <iostream>
#include <mutex>
#include <optional>
#include <thread>

#include "amqp/connection.hpp"
#include "sluice/aws/error.hpp"
#include "sluice/sqs/client.hpp"

namespace sluice::app {
namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

namespace {

enum class Check { exists, missing, unknown, interrupted };

// Waits for a check running elsewhere, at most 15 s, while no signal comes.
template <class Wait>
Check wait_for_check(Wait&& ready, const std::function<bool()>& signalled) {
  const auto until = Clock::now() + std::chrono::seconds(15);
  while (!ready(std::chrono::milliseconds(100))) {
    if (signalled()) return Check::interrupted;
    if (Clock::now() >= until) return Check::unknown;
  }
  return signalled() ? Check::interrupted : Check::exists;  // the caller reads the result
}

class SqsQueueWatch final : public QueueWatch {
 public:
  explicit SqsQueueWatch(const SqsSourceOptions& options) : options_(options) {
    try {
      client_.emplace(io_.get_executor(), options_.client);
    } catch (const aws::AwsError& e) {
      throw ConfigError(std::string("source: ") + e.what());
    }
  }
  ~SqsQueueWatch() override { stop(); }

  int check_at_start(bool wait_for_queue, const std::function<bool()>& signalled) override {
    const Check queue = check(options_.queue_url, signalled);
    const Check dead_letters = queue == Check::interrupted || options_.dead_letter_queue_url.empty()
                                   ? Check::unknown
                                   : check(options_.dead_letter_queue_url, signalled);
    if (queue == Check::interrupted || dead_letters == Check::interrupted) return -1;
    if (queue == Check::missing && !wait_for_queue) {
      std::cerr << "sluice: source.queue_url (SLUICE_QUEUE_URL): the queue " << options_.queue_url
                << " does not exist (set source.wait_for_queue: true to wait for it)\n";
      return 2;
    }
    if (dead_letters == Check::missing) {
      std::cerr << "sluice: dead_letter.queue_url (SLUICE_DEAD_LETTER_QUEUE_URL): the queue "
                << options_.dead_letter_queue_url << " does not exist\n";
      return 2;
    }
    return 0;
  }

  void start(QueueCounts& counts) override {
    asio::co_spawn(
        io_,
        [this, &counts]() -> asio::awaitable<void> {
          asio::steady_timer timer(io_);
          for (;;) {
            try {
              const auto attrs = co_await client_->get_queue_attributes(options_.queue_url);
              counts.visible = std::stol(attrs.at("ApproximateNumberOfMessages"));
              counts.not_visible = std::stol(attrs.at("ApproximateNumberOfMessagesNotVisible"));
              counts.read_at_ns = Clock::now().time_since_epoch().count();
            } catch (const std::exception& e) {
              spdlog::debug("event=queue_stats_failed error=\"{}\"", e.what());
            }
            timer.expires_after(std::chrono::milliseconds(500));
            co_await timer.async_wait(asio::use_awaitable);
          }
        },
        asio::detached);
    thread_ = std::thread([this] { io_.run(); });
  }

  void stop() override {
    io_.stop();
    if (thread_.joinable()) thread_.join();
  }

 private:
  Check check(const std::string& url, const std::function<bool()>& signalled) {
    try {
      auto result = asio::co_spawn(io_, client_->get_queue_attributes(url), asio::use_future);
      const Check waited = wait_for_check(
          [&](std::chrono::milliseconds slice) {
            io_.restart();
            io_.run_for(slice);
            return result.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
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

  const SqsSourceOptions& options_;
  asio::io_context io_;
  std::optional<sqs::SqsClient> client_;
  std::thread thread_;
};

// RabbitMQ: a connection of its own, a passive queue.declare (ready count and
// consumers; AMQP does not report unacknowledged counts: the container's own are used).
class AmqpQueueWatch final : public QueueWatch {
 public:
  explicit AmqpQueueWatch(const AmqpSourceOptions& options) : options_(options) {}
  ~AmqpQueueWatch() override { stop(); }

  int check_at_start(bool wait_for_queue, const std::function<bool()>& signalled) override {
    auto result = std::make_shared<std::promise<int>>();
    auto future = result->get_future();
    // Detached: a broker that never answers must not hold the exit (connect and call
    // timeouts end it within 40 s at most; it touches only what it owns).
    std::thread([options = options_, result] {
      try {
        auto connection = connect(options, "-check");
        connection->open_channel(1);
        connection->inspect_queue(1, options.queue);
        // Reading needs its own permission: a consumer (prefetch 1) proves it. A message
        // it may take is requeued when this connection closes, unharmed.
        connection->qos(1, 1, false);
        connection->cancel(1, connection->consume(1, options.queue, "sluice-check"));
        result->set_value(0);
      } catch (const amqp::AmqpError& e) {
        // Said before the answer: the main thread may exit as soon as it has it.
        const bool refused = e.kind() == amqp::AmqpError::Kind::auth || e.reply_code() == 403;
        const bool tls = e.kind() == amqp::AmqpError::Kind::tls;
        if (refused)
          std::cerr << "sluice: source.amqp_url (SLUICE_AMQP_URL): " << e.what() << "\n";
        else if (tls)
          std::cerr << "sluice: source.amqp_url (SLUICE_AMQP_URL) / source.ca_file: " << e.what()
                    << "\n";
        else if (!e.not_found())
          spdlog::warn("event=queue_check_failed error=\"{}\" action=continue", e.what());
        result->set_value(e.not_found() ? 404 : refused || tls ? 403 : 1);
      }
    }).detach();
    const Check waited = wait_for_check(
        [&](std::chrono::milliseconds slice) {
          return future.wait_for(slice) == std::future_status::ready;
        },
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
      std::cerr << "sluice: source.queue (SLUICE_AMQP_QUEUE): the queue '" << options_.queue
                << "' does not exist on " << amqp::parse_uri(options_.uri).host
                << " (set source.wait_for_queue: true to wait for it)\n";
      return 2;
    }
    return 0;
  }

  void start(QueueCounts& counts) override {
    thread_ = std::thread([this, &counts] {
      std::unique_ptr<amqp::Connection> connection;
      std::unique_lock lock(mutex_);
      while (!stopping_) {
        lock.unlock();
        try {
          if (!connection) {
            connection = connect(options_, "-stats");
            connection->open_channel(1);
          }
          const auto info = connection->inspect_queue(1, options_.queue);
          counts.visible = static_cast<long>(info.messages);
          counts.not_visible = 0;
          counts.read_at_ns = Clock::now().time_since_epoch().count();
        } catch (const amqp::AmqpError& e) {
          spdlog::debug("event=queue_stats_failed error=\"{}\"", e.what());
          connection.reset();
        }
        lock.lock();
        wake_.wait_for(lock, std::chrono::milliseconds(500), [&] { return stopping_; });
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
  static std::unique_ptr<amqp::Connection> connect(const AmqpSourceOptions& options,
                                                   const std::string& suffix) {
    amqp::ConnectionOptions o;
    o.uri = amqp::parse_uri(options.uri);
    o.connection_name = options.connection_name + suffix;
    o.ca_file = options.ca_file;
    o.verify_hostname = options.verify_hostname;
    o.heartbeat = std::chrono::seconds(0);  // short calls; a dead peer fails them
    o.rpc_timeout = std::chrono::seconds(5);
    o.connect_timeout = std::chrono::seconds(5);
    return std::make_unique<amqp::Connection>(o);
  }

  AmqpSourceOptions options_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace

std::unique_ptr<QueueWatch> make_queue_watch(const PipelineConfig& config) {
  if (config.source == SourceType::rabbitmq) return std::make_unique<AmqpQueueWatch>(config.amqp);
  return std::make_unique<SqsQueueWatch>(config.sqs);
}

}  // namespace sluice::app
