// The RabbitMQ source of the listener container: the spi::Source face and the
// connection thread. One thread owns the connection (rabbitmq-c is not thread-safe) and
// everything on it: the consumer pool (amqp/consumer_pool.hpp), acks (one tracker per
// consumer), held retries and the attempt log (amqp/retry_hold.hpp), recovery. Other
// threads talk to it through commands (amqp/commands.hpp) and an eventfd; deliveries,
// decoded by amqp/delivery_decoder.hpp, go the other way through a ready list the
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
#include <cerrno>
#include <charconv>
#include <cstring>
#include <deque>
#include <future>
#include <mutex>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <variant>

#include "amqp/commands.hpp"
#include "amqp/connection.hpp"
#include "amqp/consumer_pool.hpp"
#include "amqp/consumer_scaler.hpp"
#include "amqp/delivery_decoder.hpp"
#include "amqp/retry_hold.hpp"
#include "amqp/stream.hpp"
#include "common/mutex.hpp"
#include "common/thread_name.hpp"
#include "runtime/async_wait.hpp"
#include "runtime/backoff.hpp"
#include "runtime/log_exceptions.hpp"
#include "runtime/position_saver.hpp"
#include "runtime/prefix_tracker.hpp"
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
// A stream's position is saved this often (and at a stop): a crash reads again at most
// about this much (the sink's dedupe stores it once).
constexpr std::chrono::milliseconds kPositionSaveInterval{1000};

[[noreturn]] void bad_option(const std::string& name, const std::string& value,
                             const std::string& expected) {
  throw OptionError("AMQP source", name, value, expected);
}

using amqp::text;

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

using amqp::AckCommand;
using amqp::Command;
using amqp::Consumer;
using amqp::DeliveryRef;
using amqp::ExpediteCommand;
using amqp::FlushCommand;
using amqp::ReconfigureCommand;
using amqp::RejectCommand;
using amqp::ReleaseCommand;
using amqp::RetryCommand;
using runtime::Completion;

// std::visit over several lambdas.
template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};
template <class... F>
Overloaded(F...) -> Overloaded<F...>;

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
      position_key_ = "rabbitmq vhost=" + uri_.vhost + " queue=" + options_.queue +
                      " pipeline=" + context_.name;
      if (context_.positions)
        saver_ = std::make_unique<runtime::PositionSaver>(context_.positions, position_key_,
                                                          kPositionSaveInterval);
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

  ~AmqpSource() override {
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

  asio::awaitable<void> open() override {
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

  spi::SourceCapabilities capabilities() const override {
    spi::SourceCapabilities c;
    c.push = true;
    c.confirms_acks = true;
    c.ordered_groups = options_.single_active_consumer;
    c.max_batch = max_batch_;
    return c;
  }

  asio::awaitable<std::vector<Delivery>> receive(int max) override {
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

  void ack(const Delivery& state) override {
    push(AckCommand{ref(state)});
    settled_by_core(state, false);
  }
  void expedite_acks() override { push(ExpediteCommand{}); }
  void retry(const Delivery& state, std::chrono::milliseconds backoff) override {
    push(RetryCommand{ref(state), backoff, spi::receive_count_of(state)});
    settled_by_core(state, true);
  }
  void release(const Delivery& state) override {
    push(ReleaseCommand{ref(state)});
    settled_by_core(state, true);
  }
  asio::awaitable<bool> reject(Delivery state, std::string reason) override {
    spdlog::debug("amqp event=reject message_id={}{} reason=\"{}\"", spi::id_of(state),
                  spi::trace_field_of(state), reason);
    push(RejectCommand{ref(state)});
    settled_by_core(state, false);
    // basic.reject without requeue: to the queue's dead-letter exchange; a stream has none.
    co_return !stream_;
  }

  asio::awaitable<void> flush() override {
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

  std::string describe() const override { return describe_; }
  std::string message_source() const override { return message_source_; }
  std::string messaging_system() const override { return "rabbitmq"; }
  std::string destination_name() const override { return options_.queue; }

  void set_concurrency(int min, int max) override { push(ReconfigureCommand{min, max}); }

 private:
  static std::uint64_t tag_of(const Delivery& state) {
    const auto receipt = spi::receipt_of(state);
    std::uint64_t tag = 0;
    const auto [end, error] = std::from_chars(receipt.data(), receipt.data() + receipt.size(), tag);
    if (error != std::errc() || end != receipt.data() + receipt.size())  // on_deliver wrote it
      throw std::logic_error("AMQP receipt is not a delivery tag: '" + std::string(receipt) + "'");
    return tag;
  }
  static DeliveryRef ref(const Delivery& state) {
    return {spi::lease_of(state), tag_of(state), std::string(spi::id_of(state))};
  }

  // A single-active-consumer queue is one ordered group, and RabbitMQ, unlike SQS FIFO,
  // does not hold the rest of a group back while one of its messages is out: the source
  // does. It hands out the next deliveries only once the core has settled every one it
  // handed out (the core keeps a group's order among those), and none at all from a
  // failure or a release on until the rewind (rewind_if_due) has sent them all back.
  // A single active consumer's queue and a stream are read again from their oldest
  // unsettled delivery after a failure or a release (neither takes a delivery back alone:
  // the one keeps its order, the other refuses nack and reject).
  bool rewinds() const { return options_.single_active_consumer || stream_; }

  bool may_hand_out() const SLUICE_REQUIRES(ready_mutex_) {
    return !options_.single_active_consumer || (!rewinding_ && handed_out_.empty());
  }
  // After the command for `state` is pushed: the I/O thread that sees the count at zero
  // finds every command of the settled deliveries queued.
  void settled_by_core(const Delivery& state, bool returned) {
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

  void push(Command command) {
    {
      MutexLock lock(commands_mutex_);
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
                       pool_.active());
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
    const std::uint16_t probe = pool_.free_channel(connection_.get());
    connection_->open_channel(probe);
    try {
      connection_->inspect_queue(probe, options_.queue);
    } catch (const amqp::AmqpError& e) {
      if (e.kind() == amqp::AmqpError::Kind::channel) {
        amqp_channel_close_ok_t ok{};  // the broker waits for it after a channel error
        try {
          connection_->send_method(probe, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok);
        } catch (const amqp::AmqpError&) {
        }
      }
      throw;
    }
    connection_->close_channel(probe);
    spdlog::info("amqp event=connected source=\"{}\" prefetch={} consumers={}-{}", describe_,
                 pool_.prefetch_share(), scaler_.config().min_consumers,
                 scaler_.config().max_consumers);
    pool_.wanted = std::max(pool_.wanted, scaler_.config().min_consumers);
    // Reconnected after the stop's flush, or the queue turned out to be a stream read as
    // a queue: no consumers.
    if (stopping_intake_ || refused_) return;
    load_stream_position();
    for (int i = 0; i < pool_.wanted; ++i)
      if (!start_consumer()) break;
  }

  // The connection, and a duplicate of its socket for the destructor's last resort
  // (shutting a duplicate down stops the socket, and it cannot be a descriptor that
  // was closed and reused meanwhile).
  void set_connection(std::unique_ptr<amqp::Connection> connection) {
    connection_.reset();  // closes politely (bounded by the call timeout, or cut short)
    MutexLock lock(socket_mutex_);
    if (socket_fd_ >= 0) close(socket_fd_);
    socket_fd_ = connection ? dup(connection->fd()) : -1;
    connection_ = std::move(connection);
  }

  // False when max_in_flight has no room for another consumer yet.
  bool start_consumer() {
    if (!stream_) {
      if (!pool_.start(*connection_)) return false;
      report_consumers();
      return true;
    }
    // A stream: after the last offset handled (with every one before it), else where
    // the options say.
    amqp::StreamStart from = stream_start_;
    if (stream_done_) from = {amqp::StreamStart::Kind::offset, *stream_done_ + 1};
    stream_expected_ = stream_done_ ? std::optional(*stream_done_ + 1) : std::nullopt;
    amqp_table_entry_t entry{};
    amqp::stream_offset_argument(from, entry);
    const amqp_table_t arguments{1, &entry};
    if (!pool_.start(*connection_, arguments)) return false;
    stream_lease_ = pool_.latest_lease();
    stream_tracker_.resume(0, 0);
    spdlog::info("amqp event=stream_consumer_started source=\"{}\" from=\"{}\"", describe_,
                 stream_done_ ? std::to_string(*stream_done_ + 1) : options_.stream_offset);
    report_consumers();
    return true;
  }

  // The position saved by an earlier run, read once before the first consumer starts.
  // A store that cannot be read fails the connect (tried again): starting from the
  // options instead would read the whole stream again, or skip part of it.
  void load_stream_position() {
    if (!stream_ || stream_loaded_ || !context_.positions) return;
    std::optional<std::string> stored;
    try {
      stored = context_.positions->load(position_key_);
    } catch (const std::exception& e) {
      throw amqp::AmqpError(
          amqp::AmqpError::Kind::connection, 0,
          "reading the stream's saved position (" + position_key_ + "): " + e.what());
    }
    if (stored) {
      std::int64_t offset = -1;
      const auto [end, error] =
          std::from_chars(stored->data(), stored->data() + stored->size(), offset);
      if (error != std::errc() || end != stored->data() + stored->size() || offset < -1)
        throw amqp::AmqpError(amqp::AmqpError::Kind::connection, 0,
                              "the stream's saved position (" + position_key_ + ") is '" +
                                  stored->substr(0, 40) +
                                  "', expected an offset: delete that row to start from "
                                  "source.rabbitmq.stream_offset");
      stream_done_ = offset;
    }
    stream_loaded_ = true;
    spdlog::info("amqp event=stream_position source=\"{}\" key=\"{}\" saved={}", describe_,
                 position_key_, stored ? *stored : std::string("none"));
  }

  // A stream's delivery `tag` of consumer `lease` is done (acked or rejected).
  void stream_settled(std::uint64_t lease, std::uint64_t tag) {
    if (!stream_ || lease != stream_lease_) return;
    if (stream_tracker_.settled(tag) && stream_tracker_.done_sequence() > 0)
      stream_done_ = static_cast<std::int64_t>(stream_tracker_.done_position());
  }

  // Hands the position to the saver (it saves about every second); `now`: at a stop,
  // saved before the stop goes on (waiting at most 2 s for the database).
  void save_stream_position(bool now = false) {
    if (!stream_ || !stream_done_) return;
    if (stream_done_ != reported_offset_) {
      reported_offset_ = stream_done_;
      gauge("amqp_stream_offset", static_cast<double>(*stream_done_));
    }
    if (!saver_) return;
    saver_->offer(std::to_string(*stream_done_));
    if (now && !saver_->save_now(std::chrono::seconds(2)))
      spdlog::warn(
          "amqp event=stream_position_not_saved source=\"{}\" offset={} "
          "detail=\"the database did not take it in 2 s: the next start reads again "
          "what came after the last position saved\"",
          describe_, *stream_done_);
  }

  void report_consumers() { gauge("amqp_consumers", pool_.active()); }
  // Deliveries this process holds unacknowledged (being handled, held for a retry's
  // backoff, acked but not yet sent): `sluice run --until-drained` waits for none.
  void report_unacknowledged() {
    const std::size_t n = pool_.outstanding();
    if (n == reported_unacknowledged_) return;
    reported_unacknowledged_ = n;
    gauge("amqp_unacknowledged", static_cast<double>(n));
  }
  void gauge(const std::string& name, double value) {
    if (context_.gauge) context_.gauge(name, value);
  }

  void serve() {
    next_tick_ = Clock::now();
    while (!stop_) {
      amqp_connection_state_t raw = connection_->raw();
      const bool buffered = amqp_data_in_buffer(raw) || amqp_frames_enqueued(raw);
      const auto now = Clock::now();
      auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next_tick_ - now);
      if (!retries_.empty())
        wait = std::min(
            wait, std::chrono::duration_cast<std::chrono::milliseconds>(retries_.next_due() - now));
      if (rewind_due_)
        wait = std::min(wait,
                        std::chrono::duration_cast<std::chrono::milliseconds>(*rewind_due_ - now));
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
      rewind_if_due();
      report_unacknowledged();
      if (Clock::now() >= next_tick_) {
        tick();
        next_tick_ = Clock::now() + std::max(std::chrono::milliseconds(10),
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
        Consumer* consumer = pool_.on_channel(channel);
        if (!consumer) return;
        spdlog::warn("amqp event=consumer_cancelled_by_broker source=\"{}\" consumer={}", describe_,
                     consumer->tag);
        drop_channel(channel, "cancelled by the broker");
        connection_->close_channel(channel);
        schedule_recovery();
        return;
      }
      case AMQP_BASIC_CANCEL_OK_METHOD: {
        if (Consumer* consumer = pool_.on_channel(channel)) consumer->cancel_confirmed = true;
        return;
      }
      case AMQP_CHANNEL_CLOSE_METHOD: {
        amqp_channel_close_ok_t ok{};
        connection_->send_method(channel, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok);
        const auto& close = *static_cast<amqp_channel_close_t*>(method.decoded);
        if (const auto timeout =
                amqp::consumer_timeout_of(close.reply_code, text(close.reply_text)))
          on_consumer_timeout(channel, *timeout);
        else
          spdlog::warn("amqp event=channel_closed source=\"{}\" channel={} detail=\"{}\"",
                       describe_, channel, amqp::describe_close(method));
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
    amqp_message_t message;
    const amqp_rpc_reply_t reply = amqp_read_message(connection_->raw(), channel, &message, 0);
    if (reply.reply_type != AMQP_RESPONSE_NORMAL)
      throw amqp::AmqpError(
          amqp::AmqpError::Kind::connection, 0,
          "reading a delivery: " + std::string(reply.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION
                                                   ? amqp_error_string2(reply.library_error)
                                                   : "unexpected frame"));
    struct Destroy {
      amqp_message_t& message;
      ~Destroy() { amqp_destroy_message(&message); }
    } destroy{message};
    Consumer* found = pool_.on_channel(channel);
    if (!found) return;  // a channel we gave up: the broker requeues on close
    Consumer& consumer = *found;
    if (stopping_intake_) {  // on its way before our cancel: back to the queue at once
      if (stream_) return;   // a stream refuses nack; the channel's close ends it
      consumer.acks.delivered(tag);
      return_unprocessed(consumer, tag);
      return;
    }
    if (stream_ && consumer.lease == stream_lease_) track_stream_delivery(tag, message);
    if (!stream_ && !stream_checked_) {
      stream_checked_ = true;
      if (amqp::stream_offset_of(message.properties)) {
        refuse_stream_read_as_queue();
        return;
      }
    }
    auto state = decoder_
                     .decode(deliver, message, consumer.lease,
                             [this](const std::string& id) { return attempts_.get(id); })
                     .delivery;
    const auto now = Clock::now();
    consumer.acks.delivered(tag, now, std::string(spi::id_of(state)));
    bool notify = false;
    {
      MutexLock lock(ready_mutex_);
      ready_.push_back(std::move(state));
      notify = receiver_waiting_;
      receiver_waiting_ = false;
    }
    if (notify) asio::post(context_.executor, [this] { timer_.cancel(); });
    const auto decision = scaler_.on_delivery(consumer.cycle, pool_.active(), now);
    act(consumer, decision);
  }

  // A stream read as a queue: the first failure's nack would make the broker close the
  // connection (540), and the consumer would start again at "next", past what came in
  // between. Consuming stops instead (nothing read is acked: the stream keeps it all).
  void refuse_stream_read_as_queue() {
    refused_ = true;
    spdlog::error(
        "amqp event=queue_is_a_stream source=\"{}\" action=\"consuming stopped\" detail=\"the "
        "queue is a stream (its deliveries carry x-stream-offset): set "
        "source.rabbitmq.stream_offset (first, last, next, an offset or a time) to read it "
        "with a saved position\"",
        describe_);
    context_.warning("AMQP source: '" + options_.queue +
                     "' is a stream: set source.rabbitmq.stream_offset; consuming stopped");
    for (const auto channel : pool_.channels()) {
      connection_->close_channel(channel);
      drop_channel(channel, "the queue is a stream", /*expected=*/true);
    }
  }

  void track_stream_delivery(std::uint64_t tag, const amqp_message_t& message) {
    const auto offset = amqp::stream_offset_of(message.properties);
    if (offset && stream_expected_) {
      if (*offset > *stream_expected_)
        spdlog::warn(
            "amqp event=stream_offsets_gone source=\"{}\" expected={} first={} detail=\"the "
            "stream no longer holds offsets {} to {} (its retention removed them, or it was "
            "deleted and declared again): they were never read\"",
            describe_, *stream_expected_, *offset, *stream_expected_, *offset - 1);
      stream_expected_.reset();
    }
    // The first delivery pins where the options said to start ("next", "last", a
    // time): a rewind or a recovery before anything is done starts there again, and so
    // does a restart (-1: from offset 0).
    if (offset && !stream_done_) stream_done_ = *offset - 1;
    if (offset) {
      if (stream_seen_ && *offset <= *stream_seen_) {
        ++stream_redeliveries_;  // read again after a rewind or a recovery
        if (++redeliveries_unreported_ >= 100) report_stream_redeliveries();
      }
      stream_seen_ = std::max(stream_seen_.value_or(*offset), *offset);
      last_delivered_offset_ = *offset;
    }
    if (!offset && !warned_no_offset_) {
      warned_no_offset_ = true;
      context_.warning("AMQP source: a delivery from '" + options_.queue +
                       "' has no x-stream-offset header: is the queue a stream "
                       "(source.rabbitmq.stream_offset is set)?");
    }
    // Without its header a delivery counts as where the last one was: the saved
    // position never passes an offset not seen.
    const auto position = last_delivered_offset_ ? *last_delivered_offset_ : stream_done_;
    if (position) stream_tracker_.delivered(tag, static_cast<std::uint64_t>(*position));
  }
  void report_stream_redeliveries() {
    redeliveries_unreported_ = 0;
    gauge("amqp_stream_redeliveries", static_cast<double>(stream_redeliveries_));
  }

  void act(Consumer& consumer, amqp::ConsumerScaler::Decision decision) {
    using Decision = amqp::ConsumerScaler::Decision;
    if (decision == Decision::start_another && !stopping_intake_) {
      ++pool_.wanted;
      spdlog::info("amqp event=consumers_up source=\"{}\" consumers={}", describe_,
                   pool_.active() + 1);
      try {
        if (!start_consumer()) schedule_recovery();  // when cancelled consumers leave room
      } catch (const amqp::AmqpError& e) {
        if (e.kind() != amqp::AmqpError::Kind::channel) throw;
        spdlog::warn("amqp event=consumer_start_failed source=\"{}\" error=\"{}\"", describe_,
                     e.what());
        schedule_recovery();
      }
    } else if (decision == Decision::stop_this && !consumer.cancelling) {
      pool_.wanted = std::max(scaler_.config().min_consumers, pool_.wanted - 1);
      spdlog::info("amqp event=consumers_down source=\"{}\" consumers={}", describe_,
                   pool_.active() - 1);
      cancel_consumer(consumer);
    }
  }

  // Stops new deliveries; the channel stays open until what it delivered is settled
  // (never in the middle of a message), then closes.
  void cancel_consumer(Consumer& consumer) {
    pool_.cancel(*connection_, consumer);
    report_consumers();
  }

  // The broker closed a channel because a delivery on it stayed unacknowledged longer
  // than its consumer_timeout: which one(s), held how long. Whatever the channel held
  // comes back from the queue; the container drops what it held under the lost lease
  // (counted lost), a handler still running on it finishes unacknowledged (at least once:
  // the pipeline's dedupe stores the record once).
  void on_consumer_timeout(std::uint16_t channel, std::chrono::milliseconds timeout) {
    if (timeout.count() == 0) timeout = options_.consumer_timeout;  // the text named none
    ++consumer_timeouts_;
    gauge("amqp_consumer_timeouts", static_cast<double>(consumer_timeouts_));
    const auto now = Clock::now();
    std::vector<amqp::AckTracker::Held> late;
    std::size_t held = 0;
    if (Consumer* consumer = pool_.on_channel(channel)) {
      late = consumer->acks.held_since(now - timeout);
      held = consumer->acks.outstanding();
    }
    std::string which;
    for (std::size_t i = 0; i < late.size() && i < 5; ++i) {
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - late[i].since);
      which += (i ? ", " : "") + late[i].id + " (delivery " + std::to_string(late[i].tag) +
               ", held " + std::to_string(ms.count()) + " ms)";
    }
    if (late.size() > 5) which += " and " + std::to_string(late.size() - 5) + " more";
    spdlog::error(
        "amqp event=consumer_timeout source=\"{}\" channel={} timeout_ms={} held={} late=\"{}\" "
        "detail=\"the broker closed the channel: a delivery stayed unacknowledged past its "
        "consumer_timeout; what the channel held comes back from the queue. Raise the broker's "
        "consumer_timeout (or the queue's x-consumer-timeout) above the longest handling, or "
        "make the handling shorter\"",
        describe_, channel, timeout.count(), held, which);
  }

  // Every delivery held on this channel is gone: the broker delivers them again.
  void drop_channel(std::uint16_t channel, const char* why, bool expected = false) {
    const auto consumer = pool_.remove(channel);
    if (!consumer) return;
    const std::uint64_t lease = consumer->lease;
    // Acks the handlers gave that never went out: those messages come back.
    if (const std::size_t unsent = consumer->acks.ack_pending())
      context_.acks_settled(0, unsent, unsent);
    {
      MutexLock lock(ready_mutex_);
      std::erase_if(ready_, [&](const Delivery& s) { return spi::lease_of(s) == lease; });
      handed_out_.erase(lease);  // the core counts them lost
    }
    spdlog::log(expected ? spdlog::level::debug : spdlog::level::warn,
                "amqp event=lease_lost source=\"{}\" channel={} reason=\"{}\"", describe_, channel,
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
    for (auto channel : pool_.channels()) drop_channel(channel, "connection lost");
    set_connection(nullptr);
    gauge("amqp_connection_blocked", 0);  // a new connection starts unblocked
    retries_.clear();
    report_unacknowledged();
    // Commands for the lost leases are answered as they come (abandoned).
  }

  void run_commands() {
    std::vector<Command> commands;
    {
      MutexLock lock(commands_mutex_);
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
        MutexLock lock(self.commands_mutex_);
        self.commands_.insert(self.commands_.begin(),
                              std::make_move_iterator(commands.begin() + next),
                              std::make_move_iterator(commands.end()));
      }
    } requeue{*this, commands, next, abandoned};
    for (; next < commands.size(); ++next)
      std::visit(Overloaded{
                     [&](ExpediteCommand&) { expedite_ = true; },
                     [&](FlushCommand& c) {
                       flush_now();
                       c.done->set_value();
                     },
                     [&](ReconfigureCommand& c) { reconfigure(c.min, c.max); },
                     [&](AckCommand& c) {
                       Consumer* consumer = pool_.by_lease(c.delivery.lease);
                       // Its channel is gone (the broker redelivers it), or not an open
                       // delivery of this channel: abandoned.
                       if (!consumer || !consumer->acks.acked(c.delivery.tag)) {
                         ++abandoned;
                         return;
                       }
                       attempts_.done(c.delivery.id);
                       ++unsent_acks_;
                       mark_dirty();
                       stream_settled(c.delivery.lease, c.delivery.tag);
                     },
                     [&](RetryCommand& c) {
                       Consumer* consumer = pool_.by_lease(c.delivery.lease);
                       if (!consumer) {
                         // Its channel is gone (the broker has it back), but the source
                         // stopped handing out for it: a rewind ends that.
                         if (rewinds()) rewind_at(Clock::now());
                         return;
                       }
                       attempts_.failed(c.delivery.id, c.receive_count);
                       if (rewinds()) {
                         ++rewind_failures_;  // returned by the rewind, after its backoff
                         rewind_at(Clock::now() + std::min(c.delay, retry_hold_max_));
                         return;
                       }
                       ++consumer->held_retries;
                       retries_.hold({Clock::now() + std::min(c.delay, retry_hold_max_),
                                      c.delivery.lease, c.delivery.tag});
                     },
                     [&](ReleaseCommand& c) {
                       Consumer* consumer = pool_.by_lease(c.delivery.lease);
                       if (!consumer) {
                         if (rewinds()) rewind_at(Clock::now());
                         return;
                       }
                       if (rewinds()) {
                         rewind_at(Clock::now());  // returned by the rewind
                         return;
                       }
                       return_unprocessed(*consumer, c.delivery.tag);
                       mark_dirty();
                     },
                     [&](RejectCommand& c) {
                       Consumer* consumer = pool_.by_lease(c.delivery.lease);
                       if (!consumer) return;
                       attempts_.done(c.delivery.id);
                       if (stream_) {
                         // A stream refuses basic.reject (it closes the connection) and
                         // dead-letters nothing: the delivery is done (the rejects table
                         // of `sluice run` keeps it), acked for the consumer's credit.
                         if (!consumer->acks.acked(c.delivery.tag)) return;
                         ++unsent_acks_;
                         mark_dirty();
                         stream_settled(c.delivery.lease, c.delivery.tag);
                         return;
                       }
                       connection_->reject(consumer->channel, c.delivery.tag, false);
                       consumer->acks.finished(c.delivery.tag);
                       mark_dirty();
                     },
                 },
                 commands[next]);
  }

  void reconfigure(int min, int max) {
    if (rewinds()) min = max = 1;  // one consumer of such a queue receives; of a stream, reads
    const int cap = std::max(1, context_.max_in_flight);
    scaler_.reconfigure(std::min(min, cap), std::min(max, cap));
    pool_.wanted =
        std::clamp(pool_.wanted, scaler_.config().min_consumers, scaler_.config().max_consumers);
    spdlog::info("amqp event=concurrency_changed source=\"{}\" consumers={}-{}", describe_,
                 scaler_.config().min_consumers, scaler_.config().max_consumers);
    // More: started now; a consumer whose prefetch is over the new share (MAX was
    // raised) is replaced, once what it holds is settled, so that the sum stays within
    // max_in_flight. Fewer: each extra consumer stops at its next cycle's end.
    for (Consumer* consumer : pool_.running())
      if (consumer->prefetch > pool_.prefetch_share()) cancel_consumer(*consumer);
    if (pool_.active() < pool_.wanted) schedule_recovery(/*now=*/true);
  }

  void send_due_retries(bool all = false) {
    const auto now = Clock::now();
    while (const auto r = retries_.take_due(now, all)) {
      Consumer* consumer = pool_.by_lease(r->lease);
      if (!consumer) continue;
      // A failure: basic.reject with requeue, which every RabbitMQ version counts toward
      // a quorum queue's x-delivery-limit (from 4.3, a nack does not).
      connection_->reject(consumer->channel, r->tag, true);
      consumer->acks.finished(r->tag);
      --consumer->held_retries;
      ++failed_returns_;
      mark_dirty();
    }
    report_returns();
  }

  // Back to the queue unprocessed (released, or never handed out at a stop): basic.nack
  // with requeue, which RabbitMQ counts as no failure from 4.3 on (before 4.3 every
  // return counts toward x-delivery-limit, a closed channel's too).
  void return_unprocessed(Consumer& consumer, std::uint64_t tag) {
    connection_->nack(consumer.channel, tag, true);
    consumer.acks.finished(tag);
    ++unprocessed_returns_;
    report_returns();
  }
  void rewind_at(Clock::time_point due) {
    rewind_due_ = rewind_due_ ? std::max(*rewind_due_, due) : due;
  }

  // A single active consumer's failure or release, once due and once the core holds
  // none of its deliveries: the acks go out, then the channel closes, which returns
  // everything it held unacknowledged to the queue in the queue's order (the failed
  // message first) and, with it, the deliveries the broker had on the way. The queue's
  // head then comes again, to a new consumer of ours or to another instance's.
  void rewind_if_due() {
    if (!rewind_due_ || Clock::now() < *rewind_due_ || stopping_intake_) return;
    {
      MutexLock lock(ready_mutex_);
      if (!handed_out_.empty()) return;  // the core still has some of the run
    }
    run_commands();  // queued before the last of them was counted settled
    if (!rewind_due_ || Clock::now() < *rewind_due_) return;  // a later failure's backoff
    const auto [returned, failed] = return_everything_held("rewound");
    {
      MutexLock lock(ready_mutex_);
      rewinding_ = false;
    }
    ++rewinds_;
    gauge("amqp_rewinds", static_cast<double>(rewinds_));
    spdlog::info("amqp event=rewound source=\"{}\" returned={} failed={}", describe_, returned,
                 failed);
    schedule_recovery(/*now=*/true);
    next_tick_ = Clock::now();
  }

  // A single active consumer's return (a rewind, a stop): the acks go out, then every
  // channel closes, which returns what it held unacknowledged in the queue's order. The
  // failed ones count as failed returns, the rest (never failed) as unprocessed.
  std::pair<std::size_t, std::size_t> return_everything_held(const char* why) {
    send_acks(/*all=*/true);
    const std::size_t returned = pool_.outstanding();
    const std::size_t failed = std::min(rewind_failures_, returned);
    failed_returns_ += failed;
    unprocessed_returns_ += returned - failed;
    rewind_failures_ = 0;
    rewind_due_.reset();
    report_returns();
    for (const auto channel : pool_.channels()) {
      connection_->close_channel(channel);
      drop_channel(channel, why, /*expected=*/true);
    }
    return {returned, failed};
  }

  void report_returns() {
    if (failed_returns_ != reported_failed_returns_) {
      reported_failed_returns_ = failed_returns_;
      gauge("amqp_failed_returns", static_cast<double>(failed_returns_));
    }
    if (unprocessed_returns_ != reported_unprocessed_returns_) {
      reported_unprocessed_returns_ = unprocessed_returns_;
      gauge("amqp_unprocessed_returns", static_cast<double>(unprocessed_returns_));
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
    pool_.for_each([&](Consumer& c) {
      const auto channel = c.channel;
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
    });
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
    pool_.close_finished(*connection_, [this](std::uint64_t lease) { return has_ready(lease); });
  }

  bool has_ready(std::uint64_t lease) {
    MutexLock lock(ready_mutex_);
    return std::any_of(ready_.begin(), ready_.end(),
                       [&](const Delivery& s) { return spi::lease_of(s) == lease; });
  }

  void tick() {
    const auto now = Clock::now();
    close_finished_consumers();
    save_stream_position();
    if (redeliveries_unreported_) report_stream_redeliveries();
    // One consumer at a time, each seeing the count its predecessors left.
    for (Consumer* c : pool_.running()) {
      if (c->cancelling) continue;
      act(*c, scaler_.on_tick(c->cycle, pool_.active(), !c->acks.empty(), now));
    }
    // Lost consumers come back after the recovery backoff.
    if (recovery_due_ && now >= *recovery_due_ && !stopping_intake_ && !refused_) {
      recovery_due_.reset();
      while (pool_.active() < pool_.wanted) {
        try {
          if (!start_consumer()) {  // no room in max_in_flight yet
            recovery_due_ = now + std::chrono::milliseconds(200);
            break;
          }
          recovery_failures_ = 0;
          spdlog::info("amqp event=consumer_started source=\"{}\" consumers={}", describe_,
                       pool_.active());
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
    if (rewinds()) {
      // Not basic.cancel: on a quorum queue the broker would make a waiting consumer
      // active at once, while what this one holds comes back only at its close, behind.
      // The acks go out, then the channel's close returns everything it held, in order,
      // before the next consumer is active. (A handler still running past the stop's
      // deadline finds its ack abandoned: the message comes again, a duplicate.)
      return_everything_held("stopped");  // its ready deliveries go with their channels
      save_stream_position(/*now=*/true);
      return;
    }
    for (Consumer* c : pool_.running()) cancel_consumer(*c);
    send_due_retries(/*all=*/true);
    std::deque<Delivery> unhanded;
    {
      MutexLock lock(ready_mutex_);
      unhanded.swap(ready_);
    }
    for (auto& s : unhanded) {
      Consumer* consumer = pool_.by_lease(spi::lease_of(s));
      if (!consumer) continue;
      return_unprocessed(*consumer, tag_of(s));
    }
    send_acks(/*all=*/true);
  }

  // While the I/O thread cannot serve (disconnected, or at its end: `last`), whoever
  // waits on a command is answered.
  void finish_commands(bool last = false) {
    std::vector<Command> commands;
    {
      MutexLock lock(commands_mutex_);
      commands.swap(commands_);
      if (last) io_running_ = false;
    }
    std::size_t abandoned = 0;
    for (auto& c : commands) {
      if (auto* flush = std::get_if<FlushCommand>(&c)) flush->done->set_value();
      abandoned += std::holds_alternative<AckCommand>(c);
      // A single active consumer stopped handing out for it: the rewind after the
      // reconnect ends that (the broker has the deliveries back already).
      if (rewinds() &&
          (std::holds_alternative<RetryCommand>(c) || std::holds_alternative<ReleaseCommand>(c)))
        rewind_at(Clock::now());
    }
    if (abandoned) context_.acks_settled(0, abandoned, abandoned);
  }

  void sleep_interruptibly(std::chrono::milliseconds duration) {
    const auto until = Clock::now() + duration;
    while (!stop_ && Clock::now() < until) {
      // Woken at once by a command (answered below: nothing can be settled without a
      // connection) or by the destructor's stop (which ends the wait).
      pollfd fd{wake_fd_, POLLIN, 0};
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
      poll(&fd, 1, static_cast<int>(std::max<std::int64_t>(left.count(), 0) + 1));
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
  const int max_in_flight_;
  amqp::ConsumerPool pool_;  // the connection thread's
  int max_batch_ = 100;
  std::chrono::milliseconds retry_hold_max_;  // options_' capped under consumer_timeout
  std::string describe_;
  std::string message_source_;  // every message's source()
  int wake_fd_ = -1;
  std::atomic<bool> wake_pending_{false};
  std::atomic<bool> stop_{false};
  std::thread io_thread_;
  std::promise<void> io_exited_;
  Mutex socket_mutex_;
  // A duplicate of the connection's socket while there is one.
  int socket_fd_ SLUICE_GUARDED_BY(socket_mutex_) = -1;
  std::shared_ptr<Completion> opened_;

  Mutex commands_mutex_;
  std::vector<Command> commands_ SLUICE_GUARDED_BY(commands_mutex_);
  // The I/O thread still answers commands.
  bool io_running_ SLUICE_GUARDED_BY(commands_mutex_) = false;

  Mutex ready_mutex_;
  std::deque<Delivery> ready_ SLUICE_GUARDED_BY(ready_mutex_);
  bool receiver_waiting_ SLUICE_GUARDED_BY(ready_mutex_) = false;
  // A single active consumer's: deliveries handed to the core and not yet settled, by
  // lease; a failure or release waits for its rewind.
  std::unordered_map<std::uint64_t, std::size_t> handed_out_ SLUICE_GUARDED_BY(ready_mutex_);
  bool rewinding_ SLUICE_GUARDED_BY(ready_mutex_) = false;
  asio::steady_timer timer_;  // the receive loop's wait; cancelled when deliveries come

  // Owned by the I/O thread.
  std::unique_ptr<amqp::Connection> connection_;
  amqp::HeldRetries retries_;
  amqp::AttemptLog attempts_;
  amqp::DeliveryDecoder decoder_;
  bool acks_dirty_ = false;  // acks, nacks or rejects since the latest frames
  Clock::time_point dirty_since_{};
  std::size_t unsent_acks_ = 0;
  std::size_t ack_batch_ = 1;
  bool expedite_ = false;
  bool stopping_intake_ = false;
  std::optional<Clock::time_point> recovery_due_;
  std::optional<Clock::time_point> rewind_due_;  // a single active consumer's
  std::uint64_t rewinds_ = 0;
  std::size_t rewind_failures_ = 0;  // retries the next rewind returns
  Clock::time_point next_tick_{};
  int recovery_failures_ = 0;  // consumer recoveries failed in a row
  std::uint64_t recoveries_ = 0;
  std::uint64_t losses_ = 0;
  std::uint64_t consumer_timeouts_ = 0;
  std::size_t reported_unacknowledged_ = 0;
  std::uint64_t ack_frames_ = 0;
  std::uint64_t failed_returns_ = 0, reported_failed_returns_ = 0;
  std::uint64_t unprocessed_returns_ = 0, reported_unprocessed_returns_ = 0;

  // A stream's (the I/O thread's, but the saver).
  const bool stream_;
  amqp::StreamStart stream_start_;  // options_.stream_offset, parsed
  std::string position_key_;
  std::unique_ptr<runtime::PositionSaver> saver_;  // with a PositionStore
  bool stream_loaded_ = false;
  std::uint64_t stream_lease_ = 0;         // the consumer whose deliveries are tracked
  runtime::PrefixTracker stream_tracker_;  // its delivery tags, positioned by offset
  // The last offset handled along with every one before it (saved, or since).
  std::optional<std::int64_t> stream_done_, reported_offset_;
  std::optional<std::int64_t> stream_expected_;        // the offset a resumed consumer asked for
  std::optional<std::int64_t> stream_seen_;            // the highest offset delivered
  std::optional<std::int64_t> last_delivered_offset_;  // the latest delivery's
  std::uint64_t stream_redeliveries_ = 0;
  int redeliveries_unreported_ = 0;
  bool warned_no_offset_ = false;
  bool stream_checked_ = false;  // a queue's first delivery was looked at: not a stream
  bool refused_ = false;         // it was one: no more consumers
};

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
    return std::unique_ptr<spi::Source>(std::make_unique<AmqpSource>(options, context));
  };
}

}  // namespace sluice
