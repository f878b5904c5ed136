#pragma once
// The RabbitMQ source's one class, shared by the files that hold its jobs:
//   amqp_source.cpp             the spi::Source face (what the container calls), options;
//   amqp_source_connection.cpp  the I/O thread: connecting, recovery, frames, consumers;
//   amqp_source_settle.cpp      commands from the core: acks, held retries, rewinds;
//   amqp_source_stream.cpp      a stream's offsets: where to start, what to save.
// One thread owns the connection (rabbitmq-c is not thread-safe) and everything on it:
// the consumer pool (amqp/consumer_pool.hpp), acks (one tracker per consumer), held
// retries and the attempt log (amqp/retry_hold.hpp), recovery. Other threads talk to it
// through commands (amqp/commands.hpp) and an eventfd; deliveries, decoded by
// amqp/delivery_decoder.hpp, go the other way through a ready list the container's
// receive loop takes from.
#include <spdlog/spdlog.h>

#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <future>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "amqp/commands.hpp"
#include "amqp/connection.hpp"
#include "amqp/consumer_pool.hpp"
#include "amqp/consumer_scaler.hpp"
#include "amqp/delivery_decoder.hpp"
#include "amqp/retry_hold.hpp"
#include "amqp/stream.hpp"
#include "common/mutex.hpp"
#include "runtime/async_wait.hpp"
#include "runtime/batch_positions.hpp"
#include "runtime/position_saver.hpp"
#include "runtime/prefix_tracker.hpp"
#include "sluice/amqp/source.hpp"
#include "sluice/spi/source.hpp"

namespace sluice::amqp_source {
namespace asio = boost::asio;
using spi::Delivery;
using spi::SourceError;
using spi::SourceErrorKind;
using Clock = std::chrono::steady_clock;

constexpr std::chrono::milliseconds kAckLinger{5};
constexpr std::chrono::milliseconds kSinglesAfter{20};
// A stream's position is saved this often (and at a stop): a crash reads again at most
// about this much (the sink's dedupe stores it once).
constexpr std::chrono::milliseconds kPositionSaveInterval{1000};

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

std::string str(std::chrono::milliseconds d);
SourceError source_error(const amqp::AmqpError& e);

class AmqpSource final : public spi::Source, private runtime::PositionsOfBatches {
 public:
  AmqpSource(AmqpSourceOptions options, spi::SourceContext context);

  ~AmqpSource() override;

  asio::awaitable<void> open() override;

  spi::SourceCapabilities capabilities() const override;

  asio::awaitable<std::vector<Delivery>> receive(int max) override;

  void ack(const Delivery& state) override;
  void expedite_acks() override { push(ExpediteCommand{}); }
  void retry(const Delivery& state, std::chrono::milliseconds backoff) override;
  void release(const Delivery& state) override;
  asio::awaitable<bool> reject(Delivery state, std::string reason) override;

  asio::awaitable<void> flush() override;
  std::shared_ptr<spi::BatchPositions> batch_positions() override { return batch_positions_; }

  std::string describe() const override { return describe_; }
  std::string message_source() const override { return message_source_; }
  std::string messaging_system() const override { return "rabbitmq"; }
  std::string destination_name() const override { return options_.queue; }

  void set_concurrency(int min, int max) override { push(ReconfigureCommand{min, max}); }

 private:
  static std::uint64_t tag_of(const Delivery& state);
  static DeliveryRef ref(const Delivery& state);

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
  void settled_by_core(const Delivery& state, bool returned);

  void push(Command command);
  void wake();

  // ------------------------------------------------------------ the I/O thread
  void io_main();

  void connect_and_start();

  // The connection, and a duplicate of its socket for the destructor's last resort
  // (shutting a duplicate down stops the socket, and it cannot be a descriptor that
  // was closed and reused meanwhile).
  void set_connection(std::unique_ptr<amqp::Connection> connection);

  // False when max_in_flight has no room for another consumer yet.
  bool start_consumer();

  // The position saved by an earlier run, read once before the first consumer starts.
  // A store that cannot be read fails the connect (tried again): starting from the
  // options instead would read the whole stream again, or skip part of it.
  void load_stream_position();

  // A stream's delivery `tag` of consumer `lease` is done (acked or rejected).
  void stream_settled(std::uint64_t lease, std::uint64_t tag);

  // Hands the position to the saver (it saves about every second); `now`: at a stop,
  // saved before the stop goes on (waiting at most 2 s for the database).
  void save_stream_position(bool now = false);

  void report_consumers() { gauge("amqp_consumers", pool_.active()); }
  // Deliveries this process holds unacknowledged (being handled, held for a retry's
  // backoff, acked but not yet sent): `sluice run --until-drained` waits for none.
  void report_unacknowledged();
  void gauge(const std::string& name, double value);

  void serve();

  void read_frames();

  void on_method(std::uint16_t channel, const amqp_method_t& method);

  void on_deliver(std::uint16_t channel, const amqp_basic_deliver_t& deliver);

  // A stream read as a queue: the first failure's nack would make the broker close the
  // connection (540), and the consumer would start again at "next", past what came in
  // between. Consuming stops instead (nothing read is acked: the stream keeps it all).
  void refuse_stream_read_as_queue();

  // A delivery of consumer `lease` (tracked when it is the stream's consumer's).
  void track_stream_delivery(std::uint64_t lease, std::uint64_t tag, const amqp_message_t& message);
  // For the writers (spi::BatchPositions): the offset done once `batch` is; `batch`
  // written, its deliveries done.
  std::optional<PositionUpdate> done_with(std::span<const spi::Delivery> batch) override;
  void written(std::span<const spi::Delivery> batch) override;
  void report_stream_redeliveries();

  void act(Consumer& consumer, amqp::ConsumerScaler::Decision decision);

  // Stops new deliveries; the channel stays open until what it delivered is settled
  // (never in the middle of a message), then closes.
  void cancel_consumer(Consumer& consumer);

  // The broker closed a channel because a delivery on it stayed unacknowledged longer
  // than its consumer_timeout: which one(s), held how long. Whatever the channel held
  // comes back from the queue; the container drops what it held under the lost lease
  // (counted lost), a handler still running on it finishes unacknowledged (at least once:
  // the pipeline's dedupe stores the record once).
  void on_consumer_timeout(std::uint16_t channel, std::chrono::milliseconds timeout);

  // Every delivery held on this channel is gone: the broker delivers them again.
  void drop_channel(std::uint16_t channel, const char* why, bool expected = false);

  // The wait before the next connect or consumer recovery after `failures` in a row:
  // 500 ms doubling up to recovery_interval, with equal jitter (runtime/backoff.hpp), so
  // instances that lost the broker together do not all come back at once.
  std::chrono::milliseconds recovery_wait(int failures) const;

  void schedule_recovery(bool now = false);

  void lose_connection();

  void run_commands();

  void reconfigure(int min, int max);

  void send_due_retries(bool all = false);

  // Back to the queue unprocessed (released, or never handed out at a stop): basic.nack
  // with requeue, which RabbitMQ counts as no failure from 4.3 on (before 4.3 every
  // return counts toward x-delivery-limit, a closed channel's too).
  void return_unprocessed(Consumer& consumer, std::uint64_t tag);
  void rewind_at(Clock::time_point due);

  // A single active consumer's failure or release, once due and once the core holds
  // none of its deliveries: the acks go out, then the channel closes, which returns
  // everything it held unacknowledged to the queue in the queue's order (the failed
  // message first) and, with it, the deliveries the broker had on the way. The queue's
  // head then comes again, to a new consumer of ours or to another instance's.
  void rewind_if_due();

  // A single active consumer's return (a rewind, a stop): the acks go out, then every
  // channel closes, which returns what it held unacknowledged in the queue's order. The
  // failed ones count as failed returns, the rest (never failed) as unprocessed.
  std::pair<std::size_t, std::size_t> return_everything_held(const char* why);

  void report_returns();

  // Acks go out in as few frames as the settled prefixes allow: when a prefetch's
  // worth has gathered, when the oldest has waited kAckLinger, or at once when the
  // container is short of permits (expedite) or stopping.
  void send_acks(bool all = false);

  void mark_dirty();

  void close_finished_consumers();

  bool has_ready(std::uint64_t lease);

  void tick();

  // On stop: no more deliveries, every held retry and every delivery not handed out
  // goes back to the queue at once, every ack goes out.
  void flush_now();

  // While the I/O thread cannot serve (disconnected, or at its end: `last`), whoever
  // waits on a command is answered.
  void finish_commands(bool last = false);

  void sleep_interruptibly(std::chrono::milliseconds duration);

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
  // Changed on the I/O thread, read by the writers too (done_with, written).
  Mutex stream_mutex_;
  // The consumer whose deliveries are tracked.
  std::uint64_t stream_lease_ SLUICE_GUARDED_BY(stream_mutex_) = 0;
  // Its delivery tags, positioned by offset.
  runtime::PrefixTracker stream_tracker_ SLUICE_GUARDED_BY(stream_mutex_);
  std::shared_ptr<runtime::SourceBatchPositions> batch_positions_;  // with a PositionStore
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

}  // namespace sluice::amqp_source
