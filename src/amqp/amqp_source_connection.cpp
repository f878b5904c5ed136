// The RabbitMQ source's I/O thread: connecting and recovering, serving the connection
// (frames, deliveries, consumer timeouts, blocked notices) and scaling its consumers.
#include <poll.h>
#include <unistd.h>

#include <algorithm>

#include "amqp/amqp_source.hpp"
#include "runtime/backoff.hpp"

namespace sluice::amqp_source {

using amqp::text;

void AmqpSource::io_main() {
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

void AmqpSource::connect_and_start() {
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

void AmqpSource::set_connection(std::unique_ptr<amqp::Connection> connection) {
  connection_.reset();  // closes politely (bounded by the call timeout, or cut short)
  MutexLock lock(socket_mutex_);
  if (socket_fd_ >= 0) close(socket_fd_);
  socket_fd_ = connection ? dup(connection->fd()) : -1;
  connection_ = std::move(connection);
}

bool AmqpSource::start_consumer() {
  if (!stream_) {
    if (!pool_.start(*connection_)) return false;
    report_consumers();
    return true;
  }
  // A stream: after the last offset handled (with every one before it), else where
  // the options say. Handled includes what the writers committed whose acks the lost
  // consumer never sent (written()).
  {
    MutexLock lock(stream_mutex_);
    if (stream_tracker_.done_sequence() > 0)
      stream_done_ = std::max(stream_done_.value_or(-1),
                              static_cast<std::int64_t>(stream_tracker_.done_position()));
  }
  amqp::StreamStart from = stream_start_;
  if (stream_done_) from = {amqp::StreamStart::Kind::offset, *stream_done_ + 1};
  stream_expected_ = stream_done_ ? std::optional(*stream_done_ + 1) : std::nullopt;
  amqp_table_entry_t entry{};
  amqp::stream_offset_argument(from, entry);
  const amqp_table_t arguments{1, &entry};
  if (!pool_.start(*connection_, arguments)) return false;
  {
    MutexLock lock(stream_mutex_);
    stream_lease_ = pool_.latest_lease();
    stream_tracker_.resume(0, 0);
  }
  spdlog::info("amqp event=stream_consumer_started source=\"{}\" from=\"{}\"", describe_,
               stream_done_ ? std::to_string(*stream_done_ + 1) : options_.stream_offset);
  report_consumers();
  return true;
}

void AmqpSource::report_unacknowledged() {
  const std::size_t n = pool_.outstanding();
  if (n == reported_unacknowledged_) return;
  reported_unacknowledged_ = n;
  gauge("amqp_unacknowledged", static_cast<double>(n));
}

void AmqpSource::gauge(const std::string& name, double value) {
  if (context_.gauge) context_.gauge(name, value);
}

void AmqpSource::serve() {
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
      wait =
          std::min(wait, std::chrono::duration_cast<std::chrono::milliseconds>(*rewind_due_ - now));
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
      next_tick_ = Clock::now() +
                   std::max(std::chrono::milliseconds(10),
                            std::min(options_.receive_timeout / 4, std::chrono::milliseconds(250)));
    }
    amqp_maybe_release_buffers(raw);
  }
}

void AmqpSource::read_frames() {
  amqp_connection_state_t raw = connection_->raw();
  for (int frames = 0; frames < 4096; ++frames) {
    amqp_frame_t frame;
    timeval zero{0, 0};
    const int status = amqp_simple_wait_frame_noblock(raw, &frame, &zero);
    if (status == AMQP_STATUS_TIMEOUT) return;
    if (status != AMQP_STATUS_OK)
      throw amqp::AmqpError(amqp::AmqpError::Kind::connection, 0,
                            std::string("reading from the broker: ") + amqp_error_string2(status));
    if (frame.frame_type != AMQP_FRAME_METHOD) continue;  // stray content: ignore
    on_method(frame.channel, frame.payload.method);
  }
}

void AmqpSource::on_method(std::uint16_t channel, const amqp_method_t& method) {
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
      if (const auto timeout = amqp::consumer_timeout_of(close.reply_code, text(close.reply_text)))
        on_consumer_timeout(channel, *timeout);
      else
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

void AmqpSource::on_deliver(std::uint16_t channel, const amqp_basic_deliver_t& deliver) {
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
  if (stream_) track_stream_delivery(consumer.lease, tag, message);
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

void AmqpSource::act(Consumer& consumer, amqp::ConsumerScaler::Decision decision) {
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

void AmqpSource::cancel_consumer(Consumer& consumer) {
  pool_.cancel(*connection_, consumer);
  report_consumers();
}

void AmqpSource::on_consumer_timeout(std::uint16_t channel, std::chrono::milliseconds timeout) {
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

void AmqpSource::drop_channel(std::uint16_t channel, const char* why, bool expected) {
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

std::chrono::milliseconds AmqpSource::recovery_wait(int failures) const {
  return runtime::failure_backoff(std::chrono::milliseconds(500), options_.recovery_interval,
                                  failures + 1, runtime::backoff_random());
}

void AmqpSource::schedule_recovery(bool now) {
  const auto due =
      Clock::now() + (now ? std::chrono::milliseconds(0) : recovery_wait(recovery_failures_));
  if (!recovery_due_ || due < *recovery_due_) recovery_due_ = due;
}

void AmqpSource::lose_connection() {
  for (auto channel : pool_.channels()) drop_channel(channel, "connection lost");
  set_connection(nullptr);
  gauge("amqp_connection_blocked", 0);  // a new connection starts unblocked
  retries_.clear();
  report_unacknowledged();
  // Commands for the lost leases are answered as they come (abandoned).
}

void AmqpSource::sleep_interruptibly(std::chrono::milliseconds duration) {
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

}  // namespace sluice::amqp_source
