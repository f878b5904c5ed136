// The RabbitMQ source's settling, on the I/O thread: the core's commands (acks, retries,
// releases, rejects, flushes), held retries sent back when due, a single active
// consumer's rewinds, and acks gathered into batches.
#include <variant>

#include "amqp/amqp_source.hpp"

namespace sluice::amqp_source {

void AmqpSource::run_commands() {
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

void AmqpSource::reconfigure(int min, int max) {
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

void AmqpSource::send_due_retries(bool all) {
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

void AmqpSource::return_unprocessed(Consumer& consumer, std::uint64_t tag) {
  connection_->nack(consumer.channel, tag, true);
  consumer.acks.finished(tag);
  ++unprocessed_returns_;
  report_returns();
}

void AmqpSource::rewind_at(Clock::time_point due) {
  rewind_due_ = rewind_due_ ? std::max(*rewind_due_, due) : due;
}

void AmqpSource::rewind_if_due() {
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

std::pair<std::size_t, std::size_t> AmqpSource::return_everything_held(const char* why) {
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

void AmqpSource::report_returns() {
  if (failed_returns_ != reported_failed_returns_) {
    reported_failed_returns_ = failed_returns_;
    gauge("amqp_failed_returns", static_cast<double>(failed_returns_));
  }
  if (unprocessed_returns_ != reported_unprocessed_returns_) {
    reported_unprocessed_returns_ = unprocessed_returns_;
    gauge("amqp_unprocessed_returns", static_cast<double>(unprocessed_returns_));
  }
}

void AmqpSource::send_acks(bool all) {
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

void AmqpSource::mark_dirty() {
  if (!acks_dirty_) dirty_since_ = Clock::now();
  acks_dirty_ = true;
}

void AmqpSource::close_finished_consumers() {
  pool_.close_finished(*connection_, [this](std::uint64_t lease) { return has_ready(lease); });
}

bool AmqpSource::has_ready(std::uint64_t lease) {
  MutexLock lock(ready_mutex_);
  return std::any_of(ready_.begin(), ready_.end(),
                     [&](const Delivery& s) { return spi::lease_of(s) == lease; });
}

void AmqpSource::tick() {
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

void AmqpSource::flush_now() {
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

void AmqpSource::finish_commands(bool last) {
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

}  // namespace sluice::amqp_source
