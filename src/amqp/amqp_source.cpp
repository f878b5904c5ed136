// The RabbitMQ source of the listener container. One I/O thread owns the
// connection (rabbitmq-c is not thread-safe) and everything on it: consumers and
// their channels, acks, held retries, recovery. Other threads talk to it through a
// command list and an eventfd; deliveries go the other way through a ready list the
// container's receive loop takes from.
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <charconv>
#include <deque>
#include <future>
#include <list>
#include <mutex>
#include <queue>
#include <thread>
#include <unordered_map>

#include "amqp/ack_tracker.hpp"
#include "amqp/connection.hpp"
#include "amqp/consumer_scaler.hpp"
#include "common/crypto.hpp"
#include "runtime/async_wait.hpp"
#include "runtime/backoff.hpp"
#include "runtime/log_exceptions.hpp"
#include "sluice/amqp/source.hpp"
#include "sluice/option_error.hpp"
#include "sluice/spi/source.hpp"

namespace sluice {
namespace asio = boost::asio;
using spi::Delivery;
using spi::SourceError;
using spi::SourceErrorKind;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::chrono::milliseconds kAckLinger{5};
constexpr std::chrono::milliseconds kSinglesAfter{20};

[[noreturn]] void bad_option(const std::string& name, const std::string& value,
                             const std::string& expected) {
  throw OptionError("AMQP source", name, value, expected);
}

using amqp::text;

// A header value as text (numbers and strings; other kinds are skipped).
std::optional<std::string> field_text(const amqp_field_value_t& v) {
  switch (v.kind) {
    case AMQP_FIELD_KIND_UTF8:
    case AMQP_FIELD_KIND_BYTES:
      return text(v.value.bytes);
    case AMQP_FIELD_KIND_BOOLEAN:
      return v.value.boolean ? "true" : "false";
    case AMQP_FIELD_KIND_I8:
      return std::to_string(v.value.i8);
    case AMQP_FIELD_KIND_U8:
      return std::to_string(v.value.u8);
    case AMQP_FIELD_KIND_I16:
      return std::to_string(v.value.i16);
    case AMQP_FIELD_KIND_U16:
      return std::to_string(v.value.u16);
    case AMQP_FIELD_KIND_I32:
      return std::to_string(v.value.i32);
    case AMQP_FIELD_KIND_U32:
      return std::to_string(v.value.u32);
    case AMQP_FIELD_KIND_I64:
      return std::to_string(v.value.i64);
    case AMQP_FIELD_KIND_U64:
    case AMQP_FIELD_KIND_TIMESTAMP:
      return std::to_string(v.value.u64);
    default:
      return std::nullopt;
  }
}

SourceError source_error(const amqp::AmqpError& e) {
  using Kind = amqp::AmqpError::Kind;
  const bool permanent = e.kind() == Kind::auth || e.kind() == Kind::tls || e.reply_code() == 403;
  std::string code = e.not_found()            ? "NOT_FOUND"
                     : e.reply_code() == 403  ? "ACCESS_REFUSED"
                     : e.reply_code() == 530  ? "NOT_ALLOWED"
                     : e.reply_code() == 406  ? "PRECONDITION_FAILED"
                     : e.kind() == Kind::auth ? "ACCESS_REFUSED"
                                              : "";
  return SourceError(permanent ? SourceErrorKind::permanent : SourceErrorKind::transient, code,
                     e.what());
}

// Receive counts of messages that failed here, for classic queues (which count no
// deliveries): by message id, the oldest forgotten first.
class AttemptLog {
 public:
  int get(const std::string& id) const {
    auto it = counts_.find(id);
    return it == counts_.end() ? 0 : it->second;
  }
  void failed(const std::string& id, int receive_count) {
    auto [it, inserted] = counts_.try_emplace(id, receive_count);
    if (!inserted) {
      it->second = std::max(it->second, receive_count);
      return;
    }
    order_.push_back(id);
    while (order_.size() > kCapacity) {
      counts_.erase(order_.front());
      order_.pop_front();
    }
  }
  void done(const std::string& id) { counts_.erase(id); }  // its entry in order_ ages out

 private:
  static constexpr std::size_t kCapacity = 100000;
  std::unordered_map<std::string, int> counts_;
  std::deque<std::string> order_;
};

// The connection thread hands its results (opened, flushed) to coroutines on the
// container's executor as runtime::Completion; the source joins its thread before the
// container's executor goes away.
using runtime::Completion;

struct Command {
  enum Kind { ack, retry, release, reject, expedite, flush, reconfigure };
  explicit Command(Kind k) : kind(k) {}
  Kind kind;
  std::uint64_t lease = 0;
  std::uint64_t tag = 0;
  std::chrono::milliseconds delay{0};
  std::string id;
  int receive_count = 0;
  std::shared_ptr<Completion> done;  // flush
  int min = 0, max = 0;              // reconfigure
};

struct Consumer {
  std::uint16_t channel = 0;
  std::uint64_t lease = 0;
  int prefetch = 0;
  std::string tag;
  amqp::AckTracker acks;
  amqp::ConsumerScaler::Cycle cycle;
  std::size_t held_retries = 0;
  bool cancelling = false;  // basic.cancel sent (scale-down or stop)
  bool cancel_confirmed = false;
  Clock::time_point acks_waiting_since{};
};

struct HeldRetry {
  Clock::time_point due;
  std::uint64_t lease;
  std::uint64_t tag;
  bool operator>(const HeldRetry& o) const { return due > o.due; }
};

class AmqpSource final : public spi::Source {
 public:
  AmqpSource(AmqpSourceOptions options, spi::SourceContext context)
      : options_(std::move(options)),
        context_(std::move(context)),
        uri_(amqp::parse_uri(options_.uri)),
        scaler_({options_.min_consumers, options_.max_consumers,
                 options_.consecutive_active_trigger, options_.consecutive_idle_trigger,
                 options_.start_consumer_min_interval, options_.stop_consumer_min_interval,
                 options_.batch_size, options_.receive_timeout}),
        wake_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
        timer_(context_.executor) {
    if (wake_fd_ < 0) throw SourceError(SourceErrorKind::permanent, "", "eventfd failed");
    const int max_in_flight = context_.max_in_flight > 0 ? context_.max_in_flight : 100;
    if (options_.max_consumers > max_in_flight) {
      context_.warning("AMQP source: " + std::to_string(options_.max_consumers) +
                       " consumers would hold more than max_in_flight (" +
                       std::to_string(max_in_flight) + ") deliveries; using " +
                       std::to_string(max_in_flight));
      scaler_.reconfigure(std::min(options_.min_consumers, max_in_flight), max_in_flight);
    }
    max_in_flight_ = max_in_flight;
    ack_batch_ = static_cast<std::size_t>(std::max(1, prefetch_share() / 2));
    max_batch_ = std::clamp(std::max(options_.batch_size, 100), 1, max_in_flight);
    describe_ = std::string(uri_.tls ? "amqps://" : "amqp://") + uri_.host + ":" +
                std::to_string(uri_.port) + " vhost " + uri_.vhost + " queue " + options_.queue;
    message_source_ = std::string(uri_.tls ? "amqps://" : "amqp://") + uri_.host + ":" +
                      std::to_string(uri_.port) + "/" + options_.queue;
  }

  ~AmqpSource() override {
    stop_ = true;
    wake();
    if (io_thread_.joinable()) {
      // A broker that stopped answering holds a blocking rabbitmq-c call (a channel
      // close, a delivery's body) until its timeout: after a grace period the socket is
      // shut down under the I/O thread, whose call then fails at once.
      auto exited = io_exited_.get_future();
      if (exited.wait_for(std::chrono::seconds(2)) != std::future_status::ready) {
        std::lock_guard lock(socket_mutex_);
        if (socket_fd_ >= 0) shutdown(socket_fd_, SHUT_RDWR);
      }
      io_thread_.join();
    }
    close(wake_fd_);
  }

  asio::awaitable<void> open() override {
    if (!io_thread_.joinable()) {
      opened_ = std::make_shared<Completion>(context_.executor);
      io_exited_ = std::promise<void>();
      {
        std::lock_guard lock(commands_mutex_);
        io_running_ = true;
      }
      io_thread_ = std::thread([this] {
        io_main();
        io_exited_.set_value();
      });
    }
    try {
      if (!co_await opened_->wait())
        throw spi::SourceError(spi::SourceErrorKind::cancelled, "", "cancelled");
    } catch (const amqp::AmqpError& e) {
      if (io_thread_.joinable()) io_thread_.join();  // it ended: the next open starts another
      throw source_error(e);
    }
  }

  spi::SourceCapabilities capabilities() const override {
    spi::SourceCapabilities c;
    c.push = true;
    c.confirms_acks = true;
    c.max_batch = max_batch_;
    return c;
  }

  asio::awaitable<std::vector<Delivery>> receive(int max) override {
    std::vector<Delivery> out;
    for (int round = 0; round < 2; ++round) {
      {
        std::lock_guard lock(ready_mutex_);
        while (!ready_.empty() && static_cast<int>(out.size()) < max) {
          out.push_back(std::move(ready_.front()));
          ready_.pop_front();
        }
        if (!out.empty() || round == 1) break;
        receiver_waiting_ = true;
      }
      timer_.expires_after(options_.receive_timeout);
      // Ends at the timeout, when a delivery cancels it, or when the container does.
      co_await timer_.async_wait(asio::as_tuple(asio::use_awaitable));
      {
        std::lock_guard lock(ready_mutex_);
        receiver_waiting_ = false;
      }
      auto state = co_await asio::this_coro::cancellation_state;
      if (state.cancelled() != asio::cancellation_type::none)
        throw SourceError(SourceErrorKind::cancelled, "", "receive cancelled");
    }
    co_return out;
  }

  void ack(const Delivery& state) override { push(about(Command::ack, state)); }
  void expedite_acks() override { push(Command{Command::expedite}); }
  void retry(const Delivery& state, std::chrono::milliseconds backoff) override {
    Command c = about(Command::retry, state);
    c.delay = backoff;
    c.receive_count = spi::receive_count_of(state);
    push(std::move(c));
  }
  void release(const Delivery& state) override { push(about(Command::release, state)); }
  asio::awaitable<bool> reject(Delivery state, std::string reason) override {
    spdlog::debug("amqp event=reject message_id={} reason=\"{}\"", spi::id_of(state), reason);
    push(about(Command::reject, state));
    co_return true;  // basic.reject without requeue: to the queue's dead-letter exchange
  }

  asio::awaitable<void> flush() override {
    auto done = std::make_shared<Completion>(context_.executor);
    {
      // The I/O thread answers no more commands once it has ended.
      std::lock_guard lock(commands_mutex_);
      if (!io_running_) co_return;
      Command c{Command::flush};
      c.done = done;
      commands_.push_back(std::move(c));
    }
    wake();
    if (!co_await done->wait())
      throw spi::SourceError(spi::SourceErrorKind::cancelled, "", "cancelled");
  }

  std::string describe() const override { return describe_; }
  std::string message_source() const override { return message_source_; }

  void set_concurrency(int min, int max) override {
    Command c{Command::reconfigure};
    c.min = min;
    c.max = max;
    push(std::move(c));
  }

 private:
  static std::uint64_t tag_of(const Delivery& state) {
    const auto receipt = spi::receipt_of(state);
    std::uint64_t tag = 0;
    const auto [end, error] = std::from_chars(receipt.data(), receipt.data() + receipt.size(), tag);
    if (error != std::errc() || end != receipt.data() + receipt.size())  // on_deliver wrote it
      throw std::logic_error("AMQP receipt is not a delivery tag: '" + std::string(receipt) + "'");
    return tag;
  }
  static Command about(Command::Kind kind, const Delivery& state) {
    Command c{kind};
    c.lease = spi::lease_of(state);
    c.tag = tag_of(state);
    c.id = spi::id_of(state);
    return c;
  }

  void push(Command command) {
    {
      std::lock_guard lock(commands_mutex_);
      commands_.push_back(std::move(command));
    }
    wake();
  }
  void wake() {
    if (wake_pending_.exchange(true)) return;
    const std::uint64_t one = 1;
    [[maybe_unused]] auto n = write(wake_fd_, &one, sizeof one);
  }

  // ------------------------------------------------------------ the I/O thread
  void io_main() {
    int failures = 0;  // connects failed in a row
    bool first = true;
    while (!stop_) {
      bool serving = false;
      try {
        connect_and_start();
        if (first) {
          opened_->set_value();
          first = false;
        } else {
          ++recoveries_;
          gauge("amqp_connection_recoveries", static_cast<double>(recoveries_));
          spdlog::info("amqp event=connection_recovered source=\"{}\" consumers={}", describe_,
                       active_consumers());
        }
        failures = 0;
        serving = true;
        serve();  // until the connection is lost or we stop
        // Stopping: closing the connection requeues whatever is unacknowledged; a
        // broker that does not answer the close gets a second.
        connection_->set_call_timeout(std::chrono::seconds(1));
        break;
      } catch (const amqp::AmqpError& e) {
        if (first) {
          // The first connection decides open(): the container retries it with its own
          // backoff, and a missing queue or refused login is reported there.
          set_connection(nullptr);
          opened_->set_exception(std::current_exception());
          finish_commands(/*last=*/true);  // a flush waiting on us (a stop during the connect)
          return;
        }
        if (serving) {
          ++losses_;
          gauge("amqp_connections_lost", static_cast<double>(losses_));
        }
        const auto wait = recovery_wait(failures++);
        spdlog::warn("amqp event={} source=\"{}\" retry_in_ms={} error=\"{}\"",
                     serving ? "connection_lost" : "reconnect_failed", describe_, wait.count(),
                     e.what());
        lose_connection();
        sleep_interruptibly(wait);
      }
    }
    set_connection(nullptr);
    if (first) {
      opened_->set_exception(std::make_exception_ptr(
          amqp::AmqpError(amqp::AmqpError::Kind::connection, 0, "stopped before connecting")));
    }
    finish_commands(/*last=*/true);
  }

  void connect_and_start() {
    amqp::ConnectionOptions o;
    o.uri = uri_;
    o.heartbeat = options_.heartbeat;
    o.connection_name = options_.connection_name;
    o.ca_file = options_.ca_file;
    o.verify_hostname = options_.verify_hostname;
    set_connection(std::make_unique<amqp::Connection>(o));
    // The queue must be there (a missing one is NOT_FOUND, reported by open()).
    const std::uint16_t probe = free_channel();
    connection_->open_channel(probe);
    try {
      connection_->inspect_queue(probe, options_.queue);
    } catch (const amqp::AmqpError& e) {
      if (e.kind() == amqp::AmqpError::Kind::channel) answer_channel_close(probe);
      throw;
    }
    connection_->close_channel(probe);
    spdlog::info("amqp event=connected source=\"{}\" prefetch={} consumers={}-{}", describe_,
                 prefetch_share(), scaler_.config().min_consumers, scaler_.config().max_consumers);
    wanted_ = std::max(wanted_, scaler_.config().min_consumers);
    if (stopping_intake_) return;  // reconnected after the stop's flush: no consumers
    for (int i = 0; i < wanted_; ++i)
      if (!start_consumer()) break;
  }

  // The connection, and a duplicate of its socket for the destructor's last resort
  // (shutting a duplicate down stops the socket, and it cannot be a descriptor that
  // was closed and reused meanwhile).
  void set_connection(std::unique_ptr<amqp::Connection> connection) {
    connection_.reset();  // closes politely (bounded by the call timeout, or cut short)
    std::lock_guard lock(socket_mutex_);
    if (socket_fd_ >= 0) close(socket_fd_);
    socket_fd_ = connection ? dup(connection->fd()) : -1;
    connection_ = std::move(connection);
  }

  // After a channel error in a synchronous call the broker waits for close-ok.
  void answer_channel_close(std::uint16_t channel) {
    amqp_channel_close_ok_t ok{};
    try {
      connection_->send_method(channel, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok);
    } catch (const amqp::AmqpError&) {
    }
  }

  // The next channel number not in use, round robin up to the negotiated maximum
  // (2047 by default): a number just closed is not reused at once, so a frame still on
  // its way for the old channel can never be taken for the new one's.
  std::uint16_t free_channel() {
    const int max = std::max(2, connection_ ? amqp_get_channel_max(connection_->raw()) : 2047);
    for (int tries = 0; tries < max; ++tries) {
      next_channel_ = next_channel_ >= max ? 1 : next_channel_ + 1;
      if (!consumers_.count(static_cast<std::uint16_t>(next_channel_)))
        return static_cast<std::uint16_t>(next_channel_);
    }
    throw amqp::AmqpError(amqp::AmqpError::Kind::channel, 0, "no free channel");
  }

  // The prefetch a new consumer may have: its share (max_in_flight / MAX consumers, at
  // most `prefetch`), within what the consumers already running leave of max_in_flight.
  // Per consumer (basic.qos global=false: quorum queues refuse a channel-wide one), so
  // a consumer keeps the prefetch it started with; the sum never passes max_in_flight.
  int next_prefetch() const {
    int used = 0;
    for (auto& [ch, c] : consumers_) used += c->prefetch;
    return std::min(prefetch_share(), max_in_flight_ - used);
  }
  int prefetch_share() const {
    return std::clamp(std::min(std::max(options_.prefetch, options_.batch_size),
                               max_in_flight_ / std::max(1, scaler_.config().max_consumers)),
                      1, 65535);
  }

  // False when max_in_flight has no room for another consumer yet (consumers being
  // cancelled still hold theirs).
  bool start_consumer() {
    const int prefetch = next_prefetch();
    if (prefetch < 1) return false;
    const std::uint16_t channel = free_channel();
    connection_->open_channel(channel);
    try {
      connection_->qos(channel, static_cast<std::uint16_t>(prefetch), false);
      auto consumer = std::make_unique<Consumer>();
      consumer->prefetch = prefetch;
      consumer->channel = channel;
      consumer->lease = ++next_lease_;
      consumer->tag = connection_->consume(
          channel, options_.queue,
          options_.connection_name + "-" + context_.name + "-" + std::to_string(consumer->lease));
      scaler_.begin(consumer->cycle, Clock::now());
      by_lease_[consumer->lease] = consumer.get();
      consumers_[channel] = std::move(consumer);
    } catch (const amqp::AmqpError& e) {
      if (e.kind() == amqp::AmqpError::Kind::channel) answer_channel_close(channel);
      throw;
    }
    report_consumers();
    return true;
  }

  int active_consumers() const {
    int n = 0;
    for (auto& [ch, c] : consumers_) n += !c->cancelling;
    return n;
  }
  void report_consumers() { gauge("amqp_consumers", active_consumers()); }
  // Deliveries this process holds unacknowledged (being handled, held for a retry's
  // backoff, acked but not yet sent): `sluice run --until-drained` waits for none.
  void report_unacknowledged() {
    std::size_t n = 0;
    for (auto& [ch, c] : consumers_) n += c->acks.outstanding();
    if (n == reported_unacknowledged_) return;
    reported_unacknowledged_ = n;
    gauge("amqp_unacknowledged", static_cast<double>(n));
  }
  void gauge(const std::string& name, double value) {
    if (context_.gauge) context_.gauge(name, value);
  }

  void serve() {
    Clock::time_point next_tick = Clock::now();
    while (!stop_) {
      amqp_connection_state_t raw = connection_->raw();
      const bool buffered = amqp_data_in_buffer(raw) || amqp_frames_enqueued(raw);
      const auto now = Clock::now();
      auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next_tick - now);
      if (!retries_.empty())
        wait = std::min(
            wait, std::chrono::duration_cast<std::chrono::milliseconds>(retries_.top().due - now));
      if (acks_dirty_)
        wait = std::min(wait, std::chrono::duration_cast<std::chrono::milliseconds>(
                                  dirty_since_ + kAckLinger - now));
      pollfd fds[2] = {{connection_->fd(), POLLIN, 0}, {wake_fd_, POLLIN, 0}};
      const int timeout =
          buffered ? 0 : static_cast<int>(std::clamp<std::int64_t>(wait.count(), 0, 100));
      if (poll(fds, 2, timeout) < 0 && errno != EINTR)
        throw amqp::AmqpError(amqp::AmqpError::Kind::connection, 0, "poll failed");
      if (fds[1].revents & POLLIN) {
        std::uint64_t value;
        [[maybe_unused]] auto n = read(wake_fd_, &value, sizeof value);
      }
      wake_pending_ = false;
      run_commands();
      read_frames();  // also sends heartbeats and notices missing ones
      send_due_retries();
      send_acks();
      report_unacknowledged();
      if (Clock::now() >= next_tick) {
        tick();
        next_tick = Clock::now() + std::max(std::chrono::milliseconds(10),
                                            std::min(options_.receive_timeout / 4,
                                                     std::chrono::milliseconds(250)));
      }
      amqp_maybe_release_buffers(raw);
    }
  }

  void read_frames() {
    amqp_connection_state_t raw = connection_->raw();
    for (int frames = 0; frames < 4096; ++frames) {
      amqp_frame_t frame;
      timeval zero{0, 0};
      const int status = amqp_simple_wait_frame_noblock(raw, &frame, &zero);
      if (status == AMQP_STATUS_TIMEOUT) return;
      if (status != AMQP_STATUS_OK)
        throw amqp::AmqpError(
            amqp::AmqpError::Kind::connection, 0,
            std::string("reading from the broker: ") + amqp_error_string2(status));
      if (frame.frame_type != AMQP_FRAME_METHOD) continue;  // stray content: ignore
      on_method(frame.channel, frame.payload.method);
    }
  }

  void on_method(std::uint16_t channel, const amqp_method_t& method) {
    switch (method.id) {
      case AMQP_BASIC_DELIVER_METHOD:
        on_deliver(channel, *static_cast<amqp_basic_deliver_t*>(method.decoded));
        return;
      case AMQP_BASIC_CANCEL_METHOD: {  // the server cancelled a consumer (queue deleted...)
        auto it = consumers_.find(channel);
        if (it == consumers_.end()) return;
        spdlog::warn("amqp event=consumer_cancelled_by_broker source=\"{}\" consumer={}", describe_,
                     it->second->tag);
        drop_channel(channel, "cancelled by the broker");
        connection_->close_channel(channel);
        schedule_recovery();
        return;
      }
      case AMQP_BASIC_CANCEL_OK_METHOD: {
        auto it = consumers_.find(channel);
        if (it != consumers_.end()) it->second->cancel_confirmed = true;
        return;
      }
      case AMQP_CHANNEL_CLOSE_METHOD: {
        amqp_channel_close_ok_t ok{};
        connection_->send_method(channel, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok);
        spdlog::warn("amqp event=channel_closed source=\"{}\" channel={} detail=\"{}\"", describe_,
                     channel, amqp::describe_close(method));
        drop_channel(channel, "channel closed");
        schedule_recovery();
        return;
      }
      case AMQP_CONNECTION_CLOSE_METHOD: {
        amqp_connection_close_ok_t ok{};
        try {
          connection_->send_method(0, AMQP_CONNECTION_CLOSE_OK_METHOD, &ok);
        } catch (const amqp::AmqpError&) {
        }
        throw amqp::AmqpError(amqp::AmqpError::Kind::connection,
                              static_cast<amqp_connection_close_t*>(method.decoded)->reply_code,
                              amqp::describe_close(method));
      }
      case AMQP_CONNECTION_BLOCKED_METHOD: {
        auto* blocked = static_cast<amqp_connection_blocked_t*>(method.decoded);
        spdlog::warn("amqp event=connection_blocked source=\"{}\" reason=\"{}\"", describe_,
                     text(blocked->reason));
        gauge("amqp_connection_blocked", 1);
        return;
      }
      case AMQP_CONNECTION_UNBLOCKED_METHOD:
        spdlog::info("amqp event=connection_unblocked source=\"{}\"", describe_);
        gauge("amqp_connection_blocked", 0);
        return;
      default:
        return;
    }
  }

  void on_deliver(std::uint16_t channel, const amqp_basic_deliver_t& deliver) {
    const std::uint64_t tag = deliver.delivery_tag;
    const bool redelivered = deliver.redelivered != 0;
    std::string exchange = text(deliver.exchange), routing_key = text(deliver.routing_key);
    amqp_message_t message;
    const amqp_rpc_reply_t reply = amqp_read_message(connection_->raw(), channel, &message, 0);
    if (reply.reply_type != AMQP_RESPONSE_NORMAL)
      throw amqp::AmqpError(
          amqp::AmqpError::Kind::connection, 0,
          "reading a delivery: " + std::string(reply.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION
                                                   ? amqp_error_string2(reply.library_error)
                                                   : "unexpected frame"));
    auto it = consumers_.find(channel);
    if (it == consumers_.end()) {  // a channel we gave up: the broker requeues on close
      amqp_destroy_message(&message);
      return;
    }
    Consumer& consumer = *it->second;
    if (stopping_intake_) {  // on its way before our cancel: back to the queue at once
      amqp_destroy_message(&message);
      consumer.acks.delivered(tag);
      connection_->nack(channel, tag, true);
      consumer.acks.finished(tag);
      return;
    }
    std::string body = text(message.body);
    const auto& p = message.properties;
    delivery_.clear();  // whatever an earlier delivery that threw left
    std::string id;
    if (p._flags & AMQP_BASIC_MESSAGE_ID_FLAG) id = text(p.message_id);
    if (id.empty()) id = "sha256:" + crypto::sha256_hex(body).substr(0, 32);
    int delivery_count = -1;
    if (p._flags & AMQP_BASIC_HEADERS_FLAG) {
      for (int i = 0; i < p.headers.num_entries; ++i) {
        const auto& e = p.headers.entries[i];
        auto value = field_text(e.value);
        if (!value) continue;
        const std::string key = text(e.key);
        if (key == "x-delivery-count") {
          try {
            delivery_count = std::stoi(*value);
          } catch (...) {
          }
        }
        delivery_.header(key, *value);
      }
    }
    if (p._flags & AMQP_BASIC_TIMESTAMP_FLAG)
      delivery_.attribute("SentTimestamp", std::to_string(p.timestamp * 1000));
    if (p._flags & AMQP_BASIC_CONTENT_TYPE_FLAG)
      delivery_.attribute("ContentType", text(p.content_type));
    if (p._flags & AMQP_BASIC_CORRELATION_ID_FLAG)
      delivery_.attribute("CorrelationId", text(p.correlation_id));
    delivery_.attribute("Exchange", exchange);
    delivery_.attribute("RoutingKey", routing_key);
    delivery_.attribute("Redelivered", redelivered ? "true" : "false");
    amqp_destroy_message(&message);
    // Quorum queues count deliveries (x-delivery-count: earlier returns); classic
    // queues only flag a redelivery, so failures seen here are counted by id too.
    // (The redelivered flag is not a failure: a consumer stopped, a connection lost.)
    auto state = delivery_.id(id)
                     .receipt(std::to_string(tag))
                     .body(std::move(body))
                     .receive_count(std::max(delivery_count >= 0 ? delivery_count + 1 : 1,
                                             attempts_.get(id) + 1))
                     .lease(consumer.lease)
                     .build();
    consumer.acks.delivered(tag);
    bool notify = false;
    {
      std::lock_guard lock(ready_mutex_);
      ready_.push_back(std::move(state));
      notify = receiver_waiting_;
      receiver_waiting_ = false;
    }
    if (notify) asio::post(context_.executor, [this] { timer_.cancel(); });
    const auto decision = scaler_.on_delivery(consumer.cycle, active_consumers(), Clock::now());
    act(consumer, decision);
  }

  void act(Consumer& consumer, amqp::ConsumerScaler::Decision decision) {
    using Decision = amqp::ConsumerScaler::Decision;
    if (decision == Decision::start_another && !stopping_intake_) {
      ++wanted_;
      spdlog::info("amqp event=consumers_up source=\"{}\" consumers={}", describe_,
                   active_consumers() + 1);
      try {
        if (!start_consumer()) schedule_recovery();  // when cancelled consumers leave room
      } catch (const amqp::AmqpError& e) {
        if (e.kind() != amqp::AmqpError::Kind::channel) throw;
        spdlog::warn("amqp event=consumer_start_failed source=\"{}\" error=\"{}\"", describe_,
                     e.what());
        schedule_recovery();
      }
    } else if (decision == Decision::stop_this && !consumer.cancelling) {
      wanted_ = std::max(scaler_.config().min_consumers, wanted_ - 1);
      spdlog::info("amqp event=consumers_down source=\"{}\" consumers={}", describe_,
                   active_consumers() - 1);
      cancel_consumer(consumer);
    }
  }

  // Stops new deliveries; the channel stays open until what it delivered is settled
  // (never in the middle of a message), then closes.
  void cancel_consumer(Consumer& consumer) {
    consumer.cancelling = true;
    connection_->cancel(consumer.channel, consumer.tag);
    report_consumers();
  }

  // Every delivery held on this channel is gone: the broker delivers them again.
  void drop_channel(std::uint16_t channel, const char* why) {
    auto it = consumers_.find(channel);
    if (it == consumers_.end()) return;
    const std::uint64_t lease = it->second->lease;
    // Acks the handlers gave that never went out: those messages come back.
    if (const std::size_t unsent = it->second->acks.ack_pending())
      context_.acks_settled(0, unsent, unsent);
    by_lease_.erase(lease);
    consumers_.erase(it);
    {
      std::lock_guard lock(ready_mutex_);
      std::erase_if(ready_, [&](const Delivery& s) { return spi::lease_of(s) == lease; });
    }
    spdlog::warn("amqp event=lease_lost source=\"{}\" channel={} reason=\"{}\"", describe_, channel,
                 why);
    context_.lease_lost(lease);
    report_consumers();
  }

  // The wait before the next connect or consumer recovery after `failures` in a row:
  // 500 ms doubling up to recovery_interval, with equal jitter (runtime/backoff.hpp), so
  // instances that lost the broker together do not all come back at once.
  std::chrono::milliseconds recovery_wait(int failures) const {
    return runtime::failure_backoff(std::chrono::milliseconds(500), options_.recovery_interval,
                                    failures + 1, runtime::backoff_random());
  }

  void schedule_recovery(bool now = false) {
    const auto due =
        Clock::now() + (now ? std::chrono::milliseconds(0) : recovery_wait(recovery_failures_));
    if (!recovery_due_ || due < *recovery_due_) recovery_due_ = due;
  }

  void lose_connection() {
    std::vector<std::uint16_t> channels;
    for (auto& [ch, c] : consumers_) channels.push_back(ch);
    for (auto ch : channels) drop_channel(ch, "connection lost");
    set_connection(nullptr);
    while (!retries_.empty()) retries_.pop();
    report_unacknowledged();
    // Commands for the lost leases are answered as they come (abandoned).
  }

  void run_commands() {
    std::vector<Command> commands;
    {
      std::lock_guard lock(commands_mutex_);
      commands.swap(commands_);
    }
    std::size_t abandoned = 0;
    std::size_t next = 0;
    // A send that fails (the connection is gone) leaves the rest for after the loss,
    // where their leases are found gone: acks are reported abandoned, flushes answered.
    struct Requeue {
      AmqpSource& self;
      std::vector<Command>& commands;
      std::size_t& next;
      std::size_t& abandoned;
      ~Requeue() {
        if (abandoned) self.context_.acks_settled(0, abandoned, abandoned);
        if (next >= commands.size()) return;
        std::lock_guard lock(self.commands_mutex_);
        self.commands_.insert(self.commands_.begin(),
                              std::make_move_iterator(commands.begin() + next),
                              std::make_move_iterator(commands.end()));
      }
    } requeue{*this, commands, next, abandoned};
    for (; next < commands.size(); ++next) {
      auto& c = commands[next];
      if (c.kind == Command::expedite) {
        expedite_ = true;
        continue;
      }
      if (c.kind == Command::flush) {
        flush_now();
        c.done->set_value();
        continue;
      }
      if (c.kind == Command::reconfigure) {
        const int cap = std::max(1, context_.max_in_flight);
        scaler_.reconfigure(std::min(c.min, cap), std::min(c.max, cap));
        wanted_ =
            std::clamp(wanted_, scaler_.config().min_consumers, scaler_.config().max_consumers);
        spdlog::info("amqp event=concurrency_changed source=\"{}\" consumers={}-{}", describe_,
                     scaler_.config().min_consumers, scaler_.config().max_consumers);
        // More: started now; a consumer whose prefetch is over the new share (MAX was
        // raised) is replaced, once what it holds is settled, so that the sum stays
        // within max_in_flight. Fewer: each extra consumer stops at its next cycle's end.
        for (auto& [ch, consumer] : consumers_)
          if (!consumer->cancelling && consumer->prefetch > prefetch_share())
            cancel_consumer(*consumer);
        if (active_consumers() < wanted_) schedule_recovery(/*now=*/true);
        continue;
      }
      auto it = by_lease_.find(c.lease);
      if (it == by_lease_.end()) {  // its channel is gone: the broker redelivers it
        abandoned += c.kind == Command::ack;
        continue;
      }
      Consumer& consumer = *it->second;
      switch (c.kind) {
        case Command::ack:
          if (!consumer.acks.acked(c.tag)) {  // not an open delivery of this channel
            ++abandoned;
            break;
          }
          attempts_.done(c.id);
          ++unsent_acks_;
          mark_dirty();
          break;
        case Command::retry:
          attempts_.failed(c.id, c.receive_count);
          ++consumer.held_retries;
          retries_.push(
              {Clock::now() + std::min(c.delay, options_.retry_hold_max), c.lease, c.tag});
          break;
        case Command::release:
          connection_->nack(consumer.channel, c.tag, true);
          consumer.acks.finished(c.tag);
          mark_dirty();
          break;
        case Command::reject:
          attempts_.done(c.id);
          connection_->reject(consumer.channel, c.tag, false);
          consumer.acks.finished(c.tag);
          mark_dirty();
          break;
        default:
          break;
      }
    }
  }

  void send_due_retries(bool all = false) {
    const auto now = Clock::now();
    while (!retries_.empty() && (all || retries_.top().due <= now)) {
      const HeldRetry r = retries_.top();
      retries_.pop();
      auto it = by_lease_.find(r.lease);
      if (it == by_lease_.end()) continue;
      connection_->nack(it->second->channel, r.tag, true);
      it->second->acks.finished(r.tag);
      --it->second->held_retries;
      mark_dirty();
    }
  }

  // Acks go out in as few frames as the settled prefixes allow: when a prefetch's
  // worth has gathered, when the oldest has waited kAckLinger, or at once when the
  // container is short of permits (expedite) or stopping.
  void send_acks(bool all = false) {
    if (!acks_dirty_ && !expedite_ && !all) return;
    const auto now = Clock::now();
    if (!all && !expedite_ && unsent_acks_ < ack_batch_ && now - dirty_since_ < kAckLinger) return;
    bool still_waiting = false;
    std::size_t sent = 0;
    for (auto& [channel, consumer] : consumers_) {
      auto& c = *consumer;
      // Acks stuck behind an open delivery go one by one after a while.
      const bool singles = all || expedite_ ||
                           (c.acks_waiting_since != Clock::time_point{} &&
                            now - c.acks_waiting_since >= kSinglesAfter);
      auto frames = c.acks.take(singles);
      try {
        if (frames.multiple_up_to) connection_->ack(channel, frames.multiple_up_to, true);
        for (auto tag : frames.singles) connection_->ack(channel, tag, false);
      } catch (...) {
        // Out of the tracker but never sent: abandoned (the broker redelivers them);
        // what earlier channels sent is confirmed.
        context_.acks_settled(sent, frames.acks, sent + frames.acks);
        throw;
      }
      ack_frames_ += (frames.multiple_up_to ? 1 : 0) + frames.singles.size();
      sent += frames.acks;
      if (c.acks.waiting() > 0) {
        if (c.acks_waiting_since == Clock::time_point{}) c.acks_waiting_since = now;
        still_waiting = true;
      } else {
        c.acks_waiting_since = {};
      }
    }
    expedite_ = false;
    acks_dirty_ = still_waiting;
    dirty_since_ = now;
    unsent_acks_ = unsent_acks_ > sent ? unsent_acks_ - sent : 0;
    if (!still_waiting) unsent_acks_ = 0;
    if (sent) {
      context_.acks_settled(sent, 0, sent);
      gauge("amqp_ack_frames", static_cast<double>(ack_frames_));
    }
    close_finished_consumers();
  }

  void mark_dirty() {
    if (!acks_dirty_) dirty_since_ = Clock::now();
    acks_dirty_ = true;
  }

  void close_finished_consumers() {
    for (auto it = consumers_.begin(); it != consumers_.end();) {
      auto& c = *it->second;
      // Closed once the broker confirmed the cancel (no delivery is still on its way)
      // and everything it delivered is settled.
      if (c.cancelling && c.cancel_confirmed && c.acks.empty() && c.held_retries == 0 &&
          !has_ready(c.lease)) {
        connection_->close_channel(c.channel);
        by_lease_.erase(c.lease);
        it = consumers_.erase(it);
      } else {
        ++it;
      }
    }
  }

  bool has_ready(std::uint64_t lease) {
    std::lock_guard lock(ready_mutex_);
    return std::any_of(ready_.begin(), ready_.end(),
                       [&](const Delivery& s) { return spi::lease_of(s) == lease; });
  }

  void tick() {
    const auto now = Clock::now();
    close_finished_consumers();
    // One consumer at a time, each seeing the count its predecessors left.
    std::vector<Consumer*> running;
    for (auto& [ch, c] : consumers_)
      if (!c->cancelling) running.push_back(c.get());
    for (Consumer* c : running) {
      if (c->cancelling) continue;
      act(*c, scaler_.on_tick(c->cycle, active_consumers(), !c->acks.empty(), now));
    }
    // Lost consumers come back after the recovery backoff.
    if (recovery_due_ && now >= *recovery_due_ && !stopping_intake_) {
      recovery_due_.reset();
      while (active_consumers() < wanted_) {
        try {
          if (!start_consumer()) {  // no room in max_in_flight yet
            recovery_due_ = now + std::chrono::milliseconds(200);
            break;
          }
          recovery_failures_ = 0;
          spdlog::info("amqp event=consumer_started source=\"{}\" consumers={}", describe_,
                       active_consumers());
        } catch (const amqp::AmqpError& e) {
          if (e.kind() != amqp::AmqpError::Kind::channel) throw;
          const auto wait = recovery_wait(recovery_failures_++);
          spdlog::warn(
              "amqp event=consumer_recovery_failed source=\"{}\" retry_in_ms={} error=\"{}\"",
              describe_, wait.count(), e.what());
          recovery_due_ = now + wait;
          break;
        }
      }
    }
  }

  // On stop: no more deliveries, every held retry and every delivery not handed out
  // goes back to the queue at once, every ack goes out.
  void flush_now() {
    if (!connection_) return;
    stopping_intake_ = true;
    for (auto& [ch, c] : consumers_)
      if (!c->cancelling) cancel_consumer(*c);
    send_due_retries(/*all=*/true);
    std::deque<Delivery> unhanded;
    {
      std::lock_guard lock(ready_mutex_);
      unhanded.swap(ready_);
    }
    for (auto& s : unhanded) {
      auto it = by_lease_.find(spi::lease_of(s));
      if (it == by_lease_.end()) continue;
      const auto tag = tag_of(s);
      connection_->nack(it->second->channel, tag, true);
      it->second->acks.finished(tag);
    }
    send_acks(/*all=*/true);
  }

  // While the I/O thread cannot serve (disconnected, or at its end: `last`), whoever
  // waits on a command is answered.
  void finish_commands(bool last = false) {
    std::vector<Command> commands;
    {
      std::lock_guard lock(commands_mutex_);
      commands.swap(commands_);
      if (last) io_running_ = false;
    }
    std::size_t abandoned = 0;
    for (auto& c : commands) {
      if (c.kind == Command::flush) c.done->set_value();
      abandoned += c.kind == Command::ack;
    }
    if (abandoned) context_.acks_settled(0, abandoned, abandoned);
  }

  void sleep_interruptibly(std::chrono::milliseconds duration) {
    const auto until = Clock::now() + duration;
    while (!stop_ && Clock::now() < until) {
      pollfd fd{wake_fd_, POLLIN, 0};
      poll(&fd, 1, 50);
      if (fd.revents & POLLIN) {
        std::uint64_t value;
        [[maybe_unused]] auto n = read(wake_fd_, &value, sizeof value);
      }
      wake_pending_ = false;
      finish_commands();  // nothing can be settled without a connection
    }
  }

  AmqpSourceOptions options_;
  spi::SourceContext context_;
  amqp::Uri uri_;
  amqp::ConsumerScaler scaler_;
  int max_in_flight_ = 100;
  int max_batch_ = 100;
  std::string describe_;
  std::string message_source_;  // every message's source()
  int wake_fd_ = -1;
  std::atomic<bool> wake_pending_{false};
  std::atomic<bool> stop_{false};
  std::thread io_thread_;
  std::promise<void> io_exited_;
  std::mutex socket_mutex_;
  int socket_fd_ = -1;  // a duplicate of the connection's socket while there is one
  std::shared_ptr<Completion> opened_;

  std::mutex commands_mutex_;
  std::vector<Command> commands_;
  bool io_running_ = false;  // the I/O thread still answers commands

  std::mutex ready_mutex_;
  std::deque<Delivery> ready_;
  bool receiver_waiting_ = false;
  asio::steady_timer timer_;  // the receive loop's wait; cancelled when deliveries come

  // Owned by the I/O thread.
  std::unique_ptr<amqp::Connection> connection_;
  std::map<std::uint16_t, std::unique_ptr<Consumer>> consumers_;
  std::unordered_map<std::uint64_t, Consumer*> by_lease_;
  std::priority_queue<HeldRetry, std::vector<HeldRetry>, std::greater<>> retries_;
  AttemptLog attempts_;
  spi::DeliveryBuilder delivery_;  // on_deliver's, on the connection thread
  std::uint64_t next_lease_ = 0;
  int wanted_ = 0;
  bool acks_dirty_ = false;  // acks, nacks or rejects since the latest frames
  Clock::time_point dirty_since_{};
  std::size_t unsent_acks_ = 0;
  std::size_t ack_batch_ = 1;
  bool expedite_ = false;
  bool stopping_intake_ = false;
  std::optional<Clock::time_point> recovery_due_;
  int recovery_failures_ = 0;  // consumer recoveries failed in a row
  std::uint64_t recoveries_ = 0;
  std::uint64_t losses_ = 0;
  int next_channel_ = 0;
  std::size_t reported_unacknowledged_ = 0;
  std::uint64_t ack_frames_ = 0;
};

std::string str(std::chrono::milliseconds d) {
  return std::to_string(d.count()) + " ms";
}

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
  if (o.heartbeat < std::chrono::seconds(0) || o.heartbeat > std::chrono::seconds(65535))
    bad_option("heartbeat", std::to_string(o.heartbeat.count()) + " s", "0..65535 s");
}

SourceFactory make_amqp_source(AmqpSourceOptions options) {
  validate(options);
  return [options = std::move(options)](const spi::SourceContext& context) {
    return std::unique_ptr<spi::Source>(std::make_unique<AmqpSource>(options, context));
  };
}

}  // namespace sluice
