// The RabbitMQ source's spi::Source face: what the container calls (open, receive,
// ack, retry, release, reject, flush), turned into commands for the connection thread
// (amqp/amqp_source.hpp); and the source's options, checked.
#include "amqp/amqp_source.hpp"

#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <stdexcept>

#include "common/thread_name.hpp"
#include "sluice/option_error.hpp"

namespace sluice::amqp_source {

std::string str(std::chrono::milliseconds d) {
  return std::to_string(d.count()) + " ms";
}

SourceError source_error(const amqp::AmqpError& e) {
  using Kind = amqp::AmqpError::Kind;
  // x-stream-offset on a queue that is not a stream: the queue's type will not change.
  const bool not_a_stream = e.reply_code() == 406 &&
                            std::string_view(e.what()).find("x-stream-offset") != std::string::npos;
  const bool permanent =
      e.kind() == Kind::auth || e.kind() == Kind::tls || e.reply_code() == 403 || not_a_stream;
  std::string code = e.not_found()            ? "NOT_FOUND"
                     : e.reply_code() == 403  ? "ACCESS_REFUSED"
                     : e.reply_code() == 530  ? "NOT_ALLOWED"
                     : e.reply_code() == 406  ? "PRECONDITION_FAILED"
                     : e.kind() == Kind::auth ? "ACCESS_REFUSED"
                                              : "";
  return SourceError(permanent ? SourceErrorKind::permanent : SourceErrorKind::transient, code,
                     not_a_stream ? std::string(e.what()) +
                                        " (source.rabbitmq.stream_offset is set: the queue is "
                                        "not a stream)"
                                  : e.what());
}

AmqpSource::AmqpSource(AmqpSourceOptions options, spi::SourceContext context)
    : options_(std::move(options)),
      context_(std::move(context)),
      uri_(amqp::parse_uri(options_.uri)),
      scaler_({options_.min_consumers, options_.max_consumers, options_.consecutive_active_trigger,
               options_.consecutive_idle_trigger, options_.start_consumer_min_interval,
               options_.stop_consumer_min_interval, options_.batch_size, options_.receive_timeout}),
      max_in_flight_(context_.max_in_flight > 0 ? context_.max_in_flight : 100),
      pool_({options_.queue, options_.connection_name + "-" + context_.name, options_.prefetch,
             options_.batch_size, max_in_flight_},
            scaler_),
      wake_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
      timer_(context_.executor),
      decoder_(options_.single_active_consumer ? options_.queue : std::string()),
      stream_(!options_.stream_offset.empty()) {
  if (wake_fd_ < 0)
    throw SourceError(
        SourceErrorKind::permanent, "",
        std::string("cannot make the I/O thread's wake-up eventfd: ") + std::strerror(errno));
  if (stream_) {
    stream_start_ = *amqp::parse_stream_start(options_.stream_offset);  // validated
    position_key_ =
        "rabbitmq vhost=" + uri_.vhost + " queue=" + options_.queue + " pipeline=" + context_.name;
    if (context_.positions) {
      saver_ = std::make_unique<runtime::PositionSaver>(context_.positions, position_key_,
                                                        kPositionSaveInterval);
      batch_positions_ = std::make_shared<runtime::SourceBatchPositions>(
          static_cast<runtime::PositionsOfBatches&>(*this));
    }
  }
  const int max_in_flight = max_in_flight_;
  if (options_.max_consumers > max_in_flight) {
    context_.warning("AMQP source: " + std::to_string(options_.max_consumers) +
                     " consumers would hold more than max_in_flight (" +
                     std::to_string(max_in_flight) + ") deliveries; using " +
                     std::to_string(max_in_flight));
    scaler_.reconfigure(std::min(options_.min_consumers, max_in_flight), max_in_flight);
  }
  // A retry held (unacknowledged) as long as the broker's consumer_timeout would have
  // the broker close its channel: held at most half of it, then returned.
  retry_hold_max_ = options_.retry_hold_max;
  if (options_.consumer_timeout.count() > 0 && retry_hold_max_ > options_.consumer_timeout / 2) {
    retry_hold_max_ = options_.consumer_timeout / 2;
    context_.warning("AMQP source: retry_hold_max (" + str(options_.retry_hold_max) +
                     ") is not under half the broker's consumer_timeout (" +
                     str(options_.consumer_timeout) + "): a failed message is held at most " +
                     str(retry_hold_max_) + ", then returned to the queue");
  }
  ack_batch_ = static_cast<std::size_t>(std::max(1, pool_.prefetch_share() / 2));
  max_batch_ = std::clamp(std::max(options_.batch_size, 100), 1, max_in_flight);
  describe_ = std::string(uri_.tls ? "amqps://" : "amqp://") + uri_.host + ":" +
              std::to_string(uri_.port) + " vhost " + uri_.vhost + " queue " + options_.queue;
  message_source_ = std::string(uri_.tls ? "amqps://" : "amqp://") + uri_.host + ":" +
                    std::to_string(uri_.port) + "/" + options_.queue;
}

AmqpSource::~AmqpSource() {
  if (batch_positions_) batch_positions_->detach();
  stop_ = true;
  wake();
  if (io_thread_.joinable()) {
    // A broker that stopped answering holds a blocking rabbitmq-c call (a channel
    // close, a delivery's body) until its timeout: after a grace period the socket is
    // shut down under the I/O thread, whose call then fails at once.
    auto exited = io_exited_.get_future();
    if (exited.wait_for(std::chrono::seconds(2)) != std::future_status::ready) {
      MutexLock lock(socket_mutex_);
      if (socket_fd_ >= 0) shutdown(socket_fd_, SHUT_RDWR);
    }
    io_thread_.join();
  }
  close(wake_fd_);
}

asio::awaitable<void> AmqpSource::open() {
  if (!io_thread_.joinable()) {
    opened_ = std::make_shared<Completion>(context_.executor);
    io_exited_ = std::promise<void>();
    {
      MutexLock lock(commands_mutex_);
      io_running_ = true;
    }
    io_thread_ = std::thread([this] {
      common::name_this_thread("sluice-amqp");
      io_main();
      io_exited_.set_value();
    });
  }
  try {
    if (!co_await opened_->wait())
      throw spi::SourceError(spi::SourceErrorKind::cancelled, "",
                             "the connection's opening was cancelled: the source is stopping");
  } catch (const amqp::AmqpError& e) {
    if (io_thread_.joinable()) io_thread_.join();  // it ended: the next open starts another
    throw source_error(e);
  }
}

spi::SourceCapabilities AmqpSource::capabilities() const {
  spi::SourceCapabilities c;
  c.push = true;
  c.confirms_acks = true;
  c.ordered_groups = options_.single_active_consumer;
  c.max_batch = max_batch_;
  return c;
}

asio::awaitable<std::vector<Delivery>> AmqpSource::receive(int max) {
  std::vector<Delivery> out;
  for (int round = 0; round < 2; ++round) {
    {
      MutexLock lock(ready_mutex_);
      if (may_hand_out()) {
        while (!ready_.empty() && static_cast<int>(out.size()) < max) {
          out.push_back(std::move(ready_.front()));
          ready_.pop_front();
        }
        if (options_.single_active_consumer)
          for (const auto& d : out) ++handed_out_[spi::lease_of(d)];
      }
      if (!out.empty() || round == 1) break;
      receiver_waiting_ = true;
    }
    timer_.expires_after(options_.receive_timeout);
    // Ends at the timeout, when a delivery cancels it, or when the container does.
    co_await timer_.async_wait(asio::as_tuple(asio::use_awaitable));
    {
      MutexLock lock(ready_mutex_);
      receiver_waiting_ = false;
    }
    auto state = co_await asio::this_coro::cancellation_state;
    if (state.cancelled() != asio::cancellation_type::none)
      throw SourceError(SourceErrorKind::cancelled, "", "receive cancelled");
  }
  co_return out;
}

void AmqpSource::ack(const Delivery& state) {
  push(AckCommand{ref(state)});
  settled_by_core(state, false);
}

void AmqpSource::retry(const Delivery& state, std::chrono::milliseconds backoff) {
  push(RetryCommand{ref(state), backoff, spi::receive_count_of(state)});
  settled_by_core(state, true);
}

void AmqpSource::release(const Delivery& state) {
  push(ReleaseCommand{ref(state)});
  settled_by_core(state, true);
}

asio::awaitable<bool> AmqpSource::reject(Delivery state, std::string reason) {
  spdlog::debug("amqp event=reject message_id={}{} reason=\"{}\"", spi::id_of(state),
                spi::trace_field_of(state), reason);
  push(RejectCommand{ref(state)});
  settled_by_core(state, false);
  // basic.reject without requeue: to the queue's dead-letter exchange; a stream has none.
  co_return !stream_;
}

asio::awaitable<void> AmqpSource::flush() {
  auto done = std::make_shared<Completion>(context_.executor);
  {
    // The I/O thread answers no more commands once it has ended.
    MutexLock lock(commands_mutex_);
    if (!io_running_) co_return;
    commands_.push_back(FlushCommand{done});
  }
  wake();
  if (!co_await done->wait())
    throw spi::SourceError(spi::SourceErrorKind::cancelled, "",
                           "the flush of pending acks was cancelled: the source is stopping");
}

std::uint64_t AmqpSource::tag_of(const Delivery& state) {
  const auto receipt = spi::receipt_of(state);
  std::uint64_t tag = 0;
  const auto [end, error] = std::from_chars(receipt.data(), receipt.data() + receipt.size(), tag);
  if (error != std::errc() || end != receipt.data() + receipt.size())  // on_deliver wrote it
    throw std::logic_error("AMQP receipt is not a delivery tag: '" + std::string(receipt) + "'");
  return tag;
}

DeliveryRef AmqpSource::ref(const Delivery& state) {
  return {spi::lease_of(state), tag_of(state), std::string(spi::id_of(state))};
}

void AmqpSource::settled_by_core(const Delivery& state, bool returned) {
  if (!options_.single_active_consumer) return;
  bool notify = false;
  {
    MutexLock lock(ready_mutex_);
    if (returned) rewinding_ = true;
    if (auto it = handed_out_.find(spi::lease_of(state));
        it != handed_out_.end() && --it->second == 0)
      handed_out_.erase(it);
    notify = receiver_waiting_ && may_hand_out() && !ready_.empty();
    if (notify) receiver_waiting_ = false;
  }
  if (notify) asio::post(context_.executor, [this] { timer_.cancel(); });
  if (returned) wake();
}

void AmqpSource::push(Command command) {
  {
    MutexLock lock(commands_mutex_);
    commands_.push_back(std::move(command));
  }
  wake();
}

void AmqpSource::wake() {
  if (wake_pending_.exchange(true)) return;
  const std::uint64_t one = 1;
  [[maybe_unused]] auto n = write(wake_fd_, &one, sizeof one);
}

}  // namespace sluice::amqp_source

namespace sluice {
namespace {

[[noreturn]] void bad_option(const std::string& name, const std::string& value,
                             const std::string& expected) {
  throw OptionError("AMQP source", name, value, expected);
}

using amqp_source::str;

}  // namespace

void validate(const AmqpSourceOptions& o) {
  try {
    amqp::parse_uri(o.uri);
  } catch (const std::invalid_argument& e) {
    // The parser's own words name the (redacted) URL and what is wrong with it.
    throw OptionError("AMQP source", "uri", "(not shown: it may hold a password)", e.what());
  }
  if (o.queue.empty()) bad_option("queue", "(empty)", "a queue name");
  if (o.queue.size() > 255) bad_option("queue", o.queue.substr(0, 40) + "...", "at most 255 bytes");
  if (o.min_consumers < 1)
    bad_option("min_consumers", std::to_string(o.min_consumers), "at least 1");
  if (o.max_consumers < o.min_consumers)
    bad_option("max_consumers", std::to_string(o.max_consumers),
               "at least min_consumers (" + std::to_string(o.min_consumers) + ")");
  if (o.single_active_consumer && o.max_consumers > 1)
    bad_option("max_consumers", std::to_string(o.max_consumers),
               "1 with single_active_consumer (only one consumer of such a queue receives)");
  if (!o.stream_offset.empty()) {
    if (!amqp::parse_stream_start(o.stream_offset))
      bad_option("stream_offset", o.stream_offset.substr(0, 40),
                 "first, last, next, an offset (0 or more) or a UTC time "
                 "(2026-12-01T08:00:00Z)");
    if (o.max_consumers > 1)
      bad_option("max_consumers", std::to_string(o.max_consumers),
                 "1 with stream_offset (each consumer of a stream reads all of it)");
    if (o.single_active_consumer)
      bad_option("single_active_consumer", "true",
                 "false with stream_offset (over AMQP 0-9-1 a stream has no single active "
                 "consumer)");
  }
  if (o.max_consumers > 1000)
    bad_option("max_consumers", std::to_string(o.max_consumers), "at most 1000");
  if (o.prefetch < 1 || o.prefetch > 65535)
    bad_option("prefetch", std::to_string(o.prefetch), "1..65535 (the AMQP limit)");
  if (o.batch_size < 1 || o.batch_size > 65535)
    bad_option("batch_size", std::to_string(o.batch_size), "1..65535");
  if (o.receive_timeout < std::chrono::milliseconds(10))
    bad_option("receive_timeout", str(o.receive_timeout), "at least 10 ms");
  if (o.consecutive_active_trigger < 1)
    bad_option("consecutive_active_trigger", std::to_string(o.consecutive_active_trigger),
               "at least 1");
  if (o.consecutive_idle_trigger < 1)
    bad_option("consecutive_idle_trigger", std::to_string(o.consecutive_idle_trigger),
               "at least 1");
  if (o.start_consumer_min_interval < std::chrono::milliseconds(0))
    bad_option("start_consumer_min_interval", str(o.start_consumer_min_interval), "0 or more");
  if (o.stop_consumer_min_interval < std::chrono::milliseconds(0))
    bad_option("stop_consumer_min_interval", str(o.stop_consumer_min_interval), "0 or more");
  if (o.recovery_interval < std::chrono::milliseconds(100))
    bad_option("recovery_interval", str(o.recovery_interval), "at least 100 ms");
  if (o.retry_hold_max < std::chrono::milliseconds(0))
    bad_option("retry_hold_max", str(o.retry_hold_max), "0 or more");
  if (o.consumer_timeout < std::chrono::milliseconds(0))
    bad_option("consumer_timeout", str(o.consumer_timeout), "0 (none) or more");
  if (o.heartbeat < std::chrono::seconds(0) || o.heartbeat > std::chrono::seconds(65535))
    bad_option("heartbeat", std::to_string(o.heartbeat.count()) + " s", "0..65535 s");
}

SourceFactory make_amqp_source(AmqpSourceOptions options) {
  validate(options);
  return [options = std::move(options)](const spi::SourceContext& context) {
    return std::unique_ptr<spi::Source>(
        std::make_unique<amqp_source::AmqpSource>(options, context));
  };
}

}  // namespace sluice
