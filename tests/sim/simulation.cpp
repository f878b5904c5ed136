#include "sim/simulation.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <functional>
#include <memory>
#include <random>
#include <set>
#include <span>

#include "runtime/clock.hpp"
#include "runtime/fault_switch.hpp"
#include "runtime/prefix_tracker.hpp"
#include "runtime/simulated_container.hpp"
#include "sinks/write_queue.hpp"
#include "sluice/spi/source.hpp"

namespace sluice::runtime::faults {
std::atomic<Switch> active{Switch::none};
}  // namespace sluice::runtime::faults

namespace sluice::sim {
namespace asio = boost::asio;
using runtime::CoreClock;
using runtime::CoreTimer;
using Ms = std::chrono::milliseconds;
using TimePoint = CoreClock::time_point;

const char* to_string(Fault fault) {
  switch (fault) {
    case Fault::receive_error:
      return "receive_error";
    case Fault::receive_timeout:
      return "receive_timeout";
    case Fault::empty_receive:
      return "empty_receive";
    case Fault::partial_receive:
      return "partial_receive";
    case Fault::duplicate_delivery:
      return "duplicate_delivery";
    case Fault::ack_failed:
      return "ack_failed";
    case Fault::extend_failed:
      return "extend_failed";
    case Fault::lease_expired:
      return "lease_expired";
    case Fault::redelivery:
      return "redelivery";
    case Fault::fifo_groups_interleaved:
      return "fifo_groups_interleaved";
    case Fault::handler_throws:
      return "handler_throws";
    case Fault::write_never_returns:
      return "write_never_returns";
    case Fault::sink_unavailable:
      return "sink_unavailable";
    case Fault::slow_write:
      return "slow_write";
    case Fault::sink_refuses_record:
      return "sink_refuses_record";
    case Fault::sink_commits_then_fails:
      return "sink_commits_then_fails";
    case Fault::reject_failed:
      return "reject_failed";
    case Fault::open_failed:
      return "open_failed";
    case Fault::stop_mid_run:
      return "stop_mid_run";
    case Fault::stop_deadline_hit:
      return "stop_deadline_hit";
    case Fault::count_:
      break;
  }
  return "?";
}

namespace {

// Where virtual time starts: far from the steady clock's zero, the same in every run.
const TimePoint kOrigin = TimePoint(std::chrono::hours(1000));

class Rng {
 public:
  explicit Rng(std::uint64_t seed) : engine_(seed) {}
  bool chance(double p) { return unit() < p; }
  int between(int lo, int hi) {  // inclusive
    return std::uniform_int_distribution<int>(lo, hi)(engine_);
  }
  double unit() { return std::uniform_real_distribution<double>(0, 1)(engine_); }

 private:
  std::mt19937_64 engine_;
};

// What a schedule is made of: drawn once per seed.
struct Shape {
  bool fifo = false;
  int groups = 1;
  int messages = 0;
  int max_in_flight = 10;
  int worker_threads = 0;
  int min_receives = 1, max_receives = 4;
  bool batch_listener = true;  // batch + manual acks through the sink; else single + on_success
  bool runs = false;           // ordered_group_runs
  bool heartbeat = true;
  Ms visibility{30000};
  Ms poll_wait{1000};
  int writers = 1;
  std::size_t write_batch = 10;
  // Fault rates.
  double p_receive_error = 0, p_receive_timeout = 0, p_partial = 0, p_duplicate = 0,
         p_ack_failed = 0, p_extend_failed = 0, p_handler_throws = 0, p_never_settles = 0,
         p_sink_unavailable = 0, p_slow_write = 0, p_sink_refuses = 0, p_commit_then_fail = 0,
         p_reject_failed = 0;
  int open_failures = 0;
  bool stop_mid_run = false;
  Ms stop_at{0};
  Ms stop_deadline{5000};
};

struct QueuedMessage {
  std::string id;
  std::optional<std::string> group;
  int seq = 0;  // its place in its group (or in the queue)
  bool in_flight = false;
  TimePoint invisible_until{};
  std::uint64_t receipt = 0;  // the latest receipt handed out
  int receive_count = 0;
  bool deleted = false;
  bool dead_lettered = false;
  bool refused_by_database = false;  // its record breaks a constraint: never written
};

struct Delivered {
  std::size_t message = 0;
  int phase = 0;
  const char* verb = nullptr;  // the settlement it got
};

// The world the core runs in: the queue, the database, the log, the checks.
struct World {
  World(std::uint64_t seed, runtime::VirtualClock& c, bool keep)
      : rng(seed), clock(c), keep_log(keep) {}
  Rng rng;
  runtime::VirtualClock& clock;
  bool keep_log;
  Shape shape;
  int phase = 1;

  std::vector<QueuedMessage> messages;
  std::map<std::uint64_t, Delivered> deliveries;  // receipt ->
  std::uint64_t next_receipt = 1;
  int outstanding = 0;  // handed out by receive() and given no settlement yet
  int open_failures_left = 0;
  // The database: one row per message id (a unique index), and per group the order in
  // which rows were first written.
  std::map<std::string, TimePoint> committed;
  std::map<std::string, int> last_committed_seq;
  // Groups whose order SQS itself no longer promises: a lease of one of their messages
  // ran out while a consumer held it, and the queue gave it out again.
  std::set<std::string> order_given_up;
  // Receives waiting for a message to become visible.
  std::vector<std::shared_ptr<CoreTimer>> waiting_receives;

  // The position a log-reading source would save (a stream's offset, a file's
  // checkpoint): the real runtime::PrefixTracker over the deliveries in the order read,
  // each done once acked or rejected. Every delivery up to it must be done.
  runtime::PrefixTracker positions;
  std::uint64_t positions_checked = 0;

  std::vector<std::string> log;
  std::uint64_t hash = 1469598103934665603ULL;
  std::map<Fault, std::uint64_t> faults;
  std::string failure;

  TimePoint now() const { return CoreClock::now(); }
  std::int64_t t() const { return std::chrono::duration_cast<Ms>(now() - kOrigin).count(); }
  void event(const std::string& what) {
    std::string line = "t=" + std::to_string(t()) + " " + what;
    for (const unsigned char c : line) hash = (hash ^ c) * 1099511628211ULL;
    hash = (hash ^ '\n') * 1099511628211ULL;
    if (keep_log) log.push_back(std::move(line));
  }
  void drew(Fault fault) { ++faults[fault]; }
  void fail(const std::string& what) {
    if (failure.empty())
      failure = what + " (virtual time " + std::to_string(t()) + " ms, phase " +
                std::to_string(phase) + ")";
    event("INVARIANT " + what);
  }

  void wake_receives() {
    for (auto& timer : waiting_receives) timer->cancel();
    waiting_receives.clear();
  }
  // Leases that ran out: the message is visible again (the queue says nothing).
  void expire_leases() {
    for (auto& m : messages)
      if (m.in_flight && !m.deleted && m.invisible_until <= now()) {
        m.in_flight = false;
        const auto held = deliveries.find(m.receipt);
        if (m.group && held != deliveries.end() && !held->second.verb &&
            order_given_up.insert(*m.group).second)
          event("order_given_up " + *m.group);
        drew(Fault::lease_expired);
        event("lease_expired " + m.id);
      }
  }
  std::optional<TimePoint> next_visible() const {
    std::optional<TimePoint> next;
    for (const auto& m : messages)
      if (m.in_flight && !m.deleted && (!next || m.invisible_until < *next))
        next = m.invisible_until;
    return next;
  }
  bool drained() const {
    return std::all_of(messages.begin(), messages.end(),
                       [](const QueuedMessage& m) { return m.deleted; });
  }
  QueuedMessage* current(const spi::Delivery& d, std::uint64_t& receipt) {
    receipt = std::stoull(std::string(spi::receipt_of(d)));
    auto& m = messages.at(deliveries.at(receipt).message);
    return m.receipt == receipt && !m.deleted ? &m : nullptr;
  }
  // One settlement per delivery, and never more.
  void settled(const spi::Delivery& d, const char* verb) {
    const auto receipt = std::stoull(std::string(spi::receipt_of(d)));
    auto& delivered = deliveries.at(receipt);
    event(std::string(verb) + " " + std::string(spi::id_of(d)) + "#" + std::to_string(receipt));
    if (delivered.verb) {
      fail("delivery " + std::string(spi::id_of(d)) + "#" + std::to_string(receipt) +
           " settled twice: " + delivered.verb + " then " + verb);
      return;
    }
    delivered.verb = verb;
    --outstanding;
    if (std::string_view(verb) == "ack" || std::string_view(verb) == "reject") {
      positions.settled(receipt);
      for (; positions_checked < positions.done_sequence(); ++positions_checked) {
        const auto it = deliveries.find(positions_checked + 1);
        const char* v = it == deliveries.end() ? nullptr : it->second.verb;
        if (!v || (std::string_view(v) != "ack" && std::string_view(v) != "reject")) {
          fail("saved position " + std::to_string(positions.done_sequence()) +
               " ahead of delivery #" + std::to_string(positions_checked + 1) + " (" +
               (v ? v : "not settled") + ")");
          break;
        }
      }
    }
  }
  // A row written: a duplicate key is success (insert first); a group's rows are
  // written in its order.
  void insert(const std::string& id) {
    if (committed.count(id)) {
      event("duplicate " + id);
      return;
    }
    committed.emplace(id, now());
    event("commit " + id);
    const auto& m = messages.at(std::stoul(id.substr(1)));
    if (!m.group) return;
    auto [last, added] = last_committed_seq.try_emplace(*m.group, m.seq);
    if (!added) {
      if (shape.fifo && m.seq < last->second && !order_given_up.count(*m.group))
        fail("group " + *m.group + ": message " + id + " (place " + std::to_string(m.seq) +
             ") written after place " + std::to_string(last->second));
      last->second = std::max(last->second, m.seq);
    }
  }
};

asio::awaitable<void> pass_time(Ms d) {
  CoreTimer timer(co_await asio::this_coro::executor, d);
  auto [ec] = co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
  if (ec) throw boost::system::system_error(asio::error::operation_aborted);
}

// The queue, as SQS holds it, behind the public source SPI.
class SimSource final : public spi::Source {
 public:
  SimSource(World& world, const spi::SourceContext& context)
      : world_(world), executor_(context.executor) {}

  asio::awaitable<void> open() override {
    co_await pass_time(Ms(world_.rng.between(0, 30)));
    if (world_.open_failures_left > 0) {
      --world_.open_failures_left;
      world_.drew(Fault::open_failed);
      world_.event("open_failed");
      throw spi::SourceError(spi::SourceErrorKind::transient, "SimUnavailable", "simulated");
    }
    world_.event("opened");
  }
  spi::SourceCapabilities capabilities() const override {
    spi::SourceCapabilities c;
    c.extendable = true;
    c.lease = world_.shape.visibility;
    c.ordered_groups = world_.shape.fifo;
    c.max_batch = 10;
    return c;
  }

  asio::awaitable<std::vector<spi::Delivery>> receive(int max) override {
    auto& w = world_;
    co_await pass_time(Ms(w.rng.between(0, 20)));
    if (w.rng.chance(w.shape.p_receive_error)) {
      w.drew(Fault::receive_error);
      w.event("receive_error");
      throw spi::SourceError(spi::SourceErrorKind::transient, "ThrottlingException", "simulated");
    }
    if (w.rng.chance(w.shape.p_receive_timeout)) {
      w.drew(Fault::receive_timeout);
      w.event("receive_timeout");
      co_await pass_time(w.shape.poll_wait + Ms(w.rng.between(0, 2000)));
      throw spi::SourceError(spi::SourceErrorKind::transient, "RequestTimeout", "simulated");
    }
    const TimePoint deadline = w.now() + w.shape.poll_wait;
    for (;;) {
      w.expire_leases();
      auto picked = pick(max);
      if (!picked.empty() || w.now() >= deadline) {
        if (picked.empty()) w.drew(Fault::empty_receive);
        co_return deliver(picked);
      }
      // A long poll: until something may be visible, a wake-up, or its end.
      TimePoint until = deadline;
      if (const auto next = w.next_visible(); next && *next < until) until = *next;
      auto timer = std::make_shared<CoreTimer>(executor_, until);
      w.waiting_receives.push_back(timer);
      auto [ec] = co_await timer->async_wait(asio::as_tuple(asio::use_awaitable));
      std::erase(w.waiting_receives, timer);
      // Cancelled and not by a wake-up (which clears the list first): the stop.
      if (ec && (co_await asio::this_coro::cancellation_state).cancelled() !=
                    asio::cancellation_type::none)
        throw boost::system::system_error(asio::error::operation_aborted);
    }
  }

  void ack(const spi::Delivery& d) override {
    auto& w = world_;
    const std::string id(spi::id_of(d));
    w.settled(d, "ack");
    if (w.shape.batch_listener && !w.committed.count(id))
      w.fail("message " + id + " acked before its record was committed");
    if (w.rng.chance(w.shape.p_ack_failed)) {
      w.drew(Fault::ack_failed);
      w.event("ack_failed " + id);
      return;
    }
    std::uint64_t receipt = 0;
    if (auto* m = w.current(d, receipt)) {
      m->deleted = true;
      m->in_flight = false;
      w.event("deleted " + id);
      if (w.shape.fifo) w.wake_receives();
    }
  }
  void retry(const spi::Delivery& d, std::chrono::milliseconds backoff) override {
    auto& w = world_;
    w.settled(d, "retry");
    std::uint64_t receipt = 0;
    if (auto* m = w.current(d, receipt)) {
      m->in_flight = true;
      m->invisible_until = w.now() + std::min<Ms>(backoff, std::chrono::hours(12));
    }
  }
  void release(const spi::Delivery& d) override {
    auto& w = world_;
    w.settled(d, "release");
    std::uint64_t receipt = 0;
    if (auto* m = w.current(d, receipt)) {
      m->in_flight = false;
      w.wake_receives();
    }
  }
  asio::awaitable<bool> reject(spi::Delivery d, std::string reason) override {
    auto& w = world_;
    co_await pass_time(Ms(w.rng.between(1, 30)));
    if (w.rng.chance(w.shape.p_reject_failed)) {
      w.drew(Fault::reject_failed);
      w.event("reject_failed " + std::string(spi::id_of(d)));
      throw spi::SourceError(spi::SourceErrorKind::transient, "SimUnavailable", "simulated");
    }
    w.settled(d, "reject");
    std::uint64_t receipt = 0;
    if (auto* m = w.current(d, receipt)) {
      m->dead_lettered = true;
      m->deleted = true;
      m->in_flight = false;
      if (w.shape.fifo) w.wake_receives();
    }
    w.event("dead_lettered " + std::string(spi::id_of(d)) + " reason=" + reason);
    co_return true;
  }
  asio::awaitable<std::size_t> extend(std::vector<spi::Delivery> deliveries) override {
    auto& w = world_;
    co_await pass_time(Ms(w.rng.between(1, 20)));
    std::size_t extended = 0;
    for (auto& d : deliveries) {
      if (w.rng.chance(w.shape.p_extend_failed)) {
        w.drew(Fault::extend_failed);
        continue;
      }
      std::uint64_t receipt = 0;
      auto* m = w.current(d, receipt);
      if (!m || !m->in_flight) continue;  // its lease ran out already: too late
      m->invisible_until = w.now() + w.shape.visibility;
      spi::set_lease_until(d, m->invisible_until);
      ++extended;
    }
    w.event("extended " + std::to_string(extended) + "/" + std::to_string(deliveries.size()));
    co_return extended;
  }
  asio::awaitable<void> flush() override { co_return; }
  std::string describe() const override { return "simulated queue"; }
  std::string message_source() const override { return "sim://queue"; }

 private:
  std::vector<std::size_t> pick(int max) {
    auto& w = world_;
    std::vector<std::size_t> candidates;
    std::set<std::string> busy_groups;
    if (w.shape.fifo)
      for (const auto& m : w.messages)
        if (m.in_flight && !m.deleted && m.group) busy_groups.insert(*m.group);
    for (std::size_t i = 0; i < w.messages.size(); ++i) {
      const auto& m = w.messages[i];
      if (m.deleted || m.in_flight) continue;
      if (w.shape.fifo && m.group && busy_groups.count(*m.group)) continue;
      candidates.push_back(i);
    }
    // A standard queue gives no order: start anywhere.
    if (!w.shape.fifo && !candidates.empty())
      std::rotate(candidates.begin(),
                  candidates.begin() + w.rng.between(0, static_cast<int>(candidates.size()) - 1),
                  candidates.end());
    std::size_t n = std::min<std::size_t>(candidates.size(), static_cast<std::size_t>(max));
    if (n > 1 && w.rng.chance(w.shape.p_partial)) {
      w.drew(Fault::partial_receive);
      n = static_cast<std::size_t>(w.rng.between(1, static_cast<int>(n) - 1));
    }
    candidates.resize(n);
    // A standard queue may deliver a message that another receive holds (at least once).
    if (!w.shape.fifo && static_cast<int>(n) < max && w.rng.chance(w.shape.p_duplicate)) {
      for (std::size_t i = 0; i < w.messages.size(); ++i)
        if (w.messages[i].in_flight && !w.messages[i].deleted) {
          w.drew(Fault::duplicate_delivery);
          candidates.push_back(i);
          break;
        }
    }
    return candidates;
  }

  std::vector<spi::Delivery> deliver(const std::vector<std::size_t>& picked) {
    auto& w = world_;
    std::vector<spi::Delivery> out;
    std::set<std::string> groups;
    std::string line = "received";
    for (const std::size_t i : picked) {
      auto& m = w.messages[i];
      if (m.receive_count > 0) w.drew(Fault::redelivery);
      ++m.receive_count;
      m.in_flight = true;
      m.invisible_until = w.now() + w.shape.visibility;
      m.receipt = w.next_receipt++;
      w.deliveries[m.receipt] = Delivered{i, w.phase, nullptr};
      w.positions.delivered(m.receipt, m.receipt);
      builder_.id(m.id)
          .receipt(std::to_string(m.receipt))
          .body(m.id)
          .receive_count(m.receive_count)
          .lease_until(m.invisible_until);
      if (m.group) {
        builder_.group(*m.group);
        groups.insert(*m.group);
      }
      out.push_back(builder_.build());
      line += " " + m.id + "#" + std::to_string(m.receipt);
    }
    if (w.shape.fifo && groups.size() > 1) w.drew(Fault::fifo_groups_interleaved);
    w.outstanding += static_cast<int>(out.size());
    if (w.outstanding > w.shape.max_in_flight)
      w.fail("in flight " + std::to_string(w.outstanding) + " above max_in_flight " +
             std::to_string(w.shape.max_in_flight));
    w.event(line);
    return out;
  }

  World& world_;
  asio::any_io_executor executor_;
  spi::DeliveryBuilder builder_;
};

// The database writers, as sluice run's: records queue in the real writers' queue
// (sinks::OrderedWriteQueue, whole batches), each writer takes a batch, writes it after
// a drawn latency and settles its messages by what the database said.
class SimSink {
 public:
  SimSink(World& world, asio::any_io_executor executor, bool may_hang)
      : world_(world), executor_(executor), may_hang_(may_hang) {}

  void push(std::vector<Message> records) {
    queue_.push(std::move(records), world_.shape.write_batch);
    wake();
  }
  void start(int writers) {
    for (int i = 0; i < writers; ++i) asio::co_spawn(executor_, write_loop(i), asio::detached);
  }

 private:
  void wake() {
    for (auto& timer : idle_) timer->cancel();
    idle_.clear();
  }

  asio::awaitable<void> write_loop(int writer) {
    auto& w = world_;
    for (;;) {
      std::vector<std::string> claimed;
      auto batch = queue_.take(&writer_tokens_.at(static_cast<std::size_t>(writer)), true,
                               w.shape.write_batch, claimed);
      if (batch.empty()) {
        auto timer = std::make_shared<CoreTimer>(executor_, TimePoint::max());
        idle_.push_back(timer);
        co_await timer->async_wait(asio::as_tuple(asio::use_awaitable));
        continue;
      }
      // Most writes are quick; some take seconds (a lock, a checkpoint, a slow network),
      // longer than a short lease: the heartbeat must keep their messages.
      Ms latency(w.rng.between(1, 60));
      if (w.rng.chance(w.shape.p_slow_write)) {
        w.drew(Fault::slow_write);
        latency = Ms(w.rng.between(500, 8000));
      }
      if (may_hang_ && w.rng.chance(w.shape.p_never_settles)) {
        // The database never answers: the batch's messages stay unsettled, their groups
        // held, until the stop gives up on them.
        w.drew(Fault::write_never_returns);
        w.event("write hangs w" + std::to_string(writer));
        co_await pass_time(Ms(std::chrono::hours(24 * 365)));
      }
      co_await pass_time(latency);
      // A record whose message was settled meanwhile (released behind a failure of its
      // group's run, as the container's contract says) is not written: the queue
      // delivers it again after the one that failed.
      std::erase_if(batch, [&](const Message& m) {
        if (m.settled()) w.event("skipped " + std::string(m.id()));
        return m.settled();
      });
      if (batch.empty()) {
        queue_.release(claimed);
        wake();
        continue;
      }
      std::string line = "write w" + std::to_string(writer);
      for (auto& m : batch) line += " " + std::string(m.id());
      w.event(line);
      if (w.rng.chance(w.shape.p_sink_unavailable)) {
        w.drew(Fault::sink_unavailable);
        w.event("sink_unavailable");
        for (auto& m : batch) m.nack();
      } else if (w.rng.chance(w.shape.p_commit_then_fail)) {
        w.drew(Fault::sink_commits_then_fails);
        // What the database took, before the answer was lost: a record it refuses is
        // never among it, nor what follows it in its group.
        std::set<std::string> refused_groups;
        for (auto& m : batch) {
          const auto group = m.group_id();
          if (group && refused_groups.count(*group)) continue;
          if (w.messages.at(std::stoul(std::string(m.id()).substr(1))).refused_by_database) {
            if (group) refused_groups.insert(*group);
            continue;
          }
          w.insert(std::string(m.id()));
        }
        w.event("sink_lost_answer");
        for (auto& m : batch) m.nack();
      } else {
        // A record the database can never take (a constraint it breaks): refused each
        // time it comes, the first of the batch that is.
        std::optional<std::size_t> refused;
        for (std::size_t i = 0; i < batch.size() && !refused; ++i)
          if (w.messages.at(std::stoul(std::string(batch[i].id()).substr(1))).refused_by_database) {
            w.drew(Fault::sink_refuses_record);
            refused = i;
          }
        // A record refused: its group's later records of the batch are not written with it
        // (their group would be overtaken); they come back.
        std::optional<std::string> refused_group =
            refused ? batch[*refused].group_id() : std::nullopt;
        std::vector<std::size_t> written;
        for (std::size_t i = 0; i < batch.size(); ++i) {
          if (refused && i == *refused) continue;
          if (refused && i > *refused && refused_group && batch[i].group_id() == refused_group)
            continue;
          w.insert(std::string(batch[i].id()));
          written.push_back(i);
        }
        for (std::size_t i = 0; i < batch.size(); ++i) {
          if (refused && i == *refused)
            batch[i].reject("refused_by_database");
          else if (std::find(written.begin(), written.end(), i) != written.end())
            batch[i].ack();
          else
            batch[i].release();
        }
      }
      queue_.release(claimed);
      wake();
    }
  }

  World& world_;
  asio::any_io_executor executor_;
  const bool may_hang_;
  sinks::OrderedWriteQueue<Message> queue_{[](const Message& m) { return m.group_id(); }};
  std::vector<std::shared_ptr<CoreTimer>> idle_;
  std::array<char, 8> writer_tokens_{};  // a writer's identity in the writers' queue
};

Shape draw_shape(Rng& rng) {
  Shape s;
  s.fifo = rng.chance(0.4);
  s.groups = s.fifo ? rng.between(1, 6) : rng.between(0, 3);
  s.messages = rng.between(1, 60);
  s.max_in_flight = rng.between(1, 30);
  s.worker_threads = rng.chance(0.3) ? 0 : rng.between(1, 4);
  s.min_receives = rng.between(1, 2);
  s.max_receives = rng.between(s.min_receives, 4);
  s.batch_listener = rng.chance(0.7);
  s.runs = s.fifo && s.batch_listener && rng.chance(0.5);
  s.heartbeat = rng.chance(0.7);
  s.visibility = Ms(rng.chance(0.3) ? rng.between(300, 2000) : rng.between(5000, 30000));
  s.poll_wait = Ms(rng.between(100, 2000));
  s.writers = rng.between(1, 3);
  s.write_batch = static_cast<std::size_t>(rng.between(1, 12));
  const double level = rng.unit();  // how hostile this schedule is
  const auto rate = [&](double high) { return rng.chance(0.6) ? rng.unit() * high * level : 0.0; };
  s.p_receive_error = rate(0.2);
  s.p_receive_timeout = rate(0.1);
  s.p_partial = rate(0.5);
  s.p_duplicate = rate(0.2);
  s.p_ack_failed = rate(0.1);
  s.p_extend_failed = rate(0.3);
  s.p_handler_throws = rate(0.2);
  s.p_never_settles = rng.chance(0.15) ? rng.unit() * 0.1 : 0.0;
  s.p_sink_unavailable = rate(0.2);
  s.p_slow_write = rate(0.2);
  s.p_sink_refuses = rate(0.1);
  s.p_commit_then_fail = rate(0.1);
  s.p_reject_failed = rate(0.3);
  s.open_failures = rng.chance(0.2) ? rng.between(1, 3) : 0;
  s.stop_mid_run = rng.chance(0.5);
  s.stop_at = Ms(rng.between(0, 6000));
  s.stop_deadline = Ms(rng.between(100, 8000));
  return s;
}

std::string describe(const Shape& s) {
  return std::string(s.fifo ? "fifo" : "standard") + " groups=" + std::to_string(s.groups) +
         " messages=" + std::to_string(s.messages) +
         " max_in_flight=" + std::to_string(s.max_in_flight) +
         " workers=" + std::to_string(s.worker_threads) +
         " receives=" + std::to_string(s.min_receives) + "-" + std::to_string(s.max_receives) +
         (s.batch_listener ? " batch+sink" : " single") + (s.runs ? " runs" : "") +
         (s.heartbeat ? "" : " no-heartbeat") +
         " visibility_ms=" + std::to_string(s.visibility.count()) +
         " writers=" + std::to_string(s.writers) + " write_batch=" + std::to_string(s.write_batch) +
         (s.stop_mid_run ? " stop_at_ms=" + std::to_string(s.stop_at.count()) : "") +
         " stop_deadline_ms=" + std::to_string(s.stop_deadline.count());
}

// One container's life on the world: started, run until `stop_when` says, stopped.
// Returns false when the world failed or time ran out.
bool run_phase(World& w, bool hostile, bool stop_mid_run, Ms stop_deadline, Ms time_cap) {
  const auto& s = w.shape;
  ContainerOptions options;
  options.name = "sim" + std::to_string(w.phase);
  options.listener_mode = s.batch_listener ? ListenerMode::batch : ListenerMode::single;
  options.ack_mode = s.batch_listener ? AckMode::manual : AckMode::on_success;
  options.ordered_group_runs = s.runs;
  options.max_in_flight = s.max_in_flight;
  options.worker_threads = s.worker_threads;
  options.min_concurrent_receives = s.min_receives;
  options.max_concurrent_receives = s.max_receives;
  options.heartbeat = s.heartbeat;
  options.failure_backoff_base = Ms(200);
  options.failure_backoff_max = Ms(5000);
  options.error_backoff_max = Ms(3000);
  options.shutdown_deadline = stop_deadline;

  std::unique_ptr<SimSink> sink;
  const auto handle_record = [&sink](Message& m) { sink->push({m}); };
  std::unique_ptr<runtime::SimulatedContainer> container;
  const auto factory = [&w](const spi::SourceContext& context) -> std::unique_ptr<spi::Source> {
    return std::make_unique<SimSource>(w, context);
  };
  const double throws = hostile ? s.p_handler_throws : s.p_handler_throws / 4;
  if (s.batch_listener) {
    container = std::make_unique<runtime::SimulatedContainer>(
        options, factory, [&w, handle_record, throws](std::span<Message> batch) {
          std::string line = "handle";
          for (auto& m : batch) line += " " + std::string(m.id());
          w.event(line);
          if (w.rng.chance(throws)) {
            w.drew(Fault::handler_throws);
            throw std::runtime_error("simulated handler failure");
          }
          for (auto& m : batch) handle_record(m);
        });
  } else {
    container =
        std::make_unique<runtime::SimulatedContainer>(options, factory, [&w, throws](Message& m) {
          w.event("handle " + std::string(m.id()));
          if (w.rng.chance(throws)) {
            w.drew(Fault::handler_throws);
            throw std::runtime_error("simulated handler failure");
          }
          w.insert(std::string(m.id()));  // written inside the handler, acked on return
          if (w.rng.chance(w.shape.p_commit_then_fail)) {
            w.drew(Fault::sink_commits_then_fails);
            throw std::runtime_error("simulated lost answer");
          }
        });
  }
  auto& io = container->io();
  auto guard = asio::make_work_guard(io);
  // A write that never returns is drawn only where a stop ends the phase (its messages
  // are held, and their leases extended, until then).
  sink = std::make_unique<SimSink>(w, io.get_executor(), hostile && stop_mid_run);
  sink->start(s.writers);
  container->start();
  w.event("phase " + std::to_string(w.phase) + " started");

  const TimePoint started = w.now();
  const TimePoint cap = started + time_cap;
  const TimePoint stop_at = started + w.shape.stop_at;
  CoreTimer stop_timer(io, stop_at);  // so that time stops there
  if (stop_mid_run) stop_timer.async_wait([](boost::system::error_code) {});
  std::optional<TimePoint> stop_started;
  const int permits_total = s.max_in_flight;
  // A phase that failed still stops its container here, on virtual time, before it goes.
  struct StopOnExit {
    runtime::SimulatedContainer& container;
    std::unique_ptr<SimSink>& sink;
    World& w;
    ~StopOnExit() {
      try {
        if (!container.stop_finished()) container.begin_stop(Ms(0));
        for (int i = 0; i < 100000 && !container.stop_finished(); ++i)
          if (container.io().poll() == 0)
            if (const auto next = w.clock.next_deadline()) w.clock.advance_to(*next);
      } catch (...) {
        w.fail("an exception while the phase's container stopped");
      }
      // What still waits on time, and the sink's timers, belong to this container's
      // context, which goes next.
      w.clock.drop_waits();
      sink.reset();
    }
  } stop_on_exit{*container, sink, w};
  for (;;) {
    const std::size_t ran = io.poll();
    if (!w.failure.empty()) return false;
    if (!stop_started && (stop_mid_run ? w.now() >= stop_at : w.drained())) {
      stop_started = w.now();
      w.event("stop deadline_ms=" + std::to_string(stop_deadline.count()));
      container->begin_stop(stop_deadline);
      continue;
    }
    if (container->stop_finished()) break;
    if (ran > 0) continue;
    const auto next = w.clock.next_deadline();
    if (!next || *next > cap) {
      w.fail(std::string("no progress: ") + (next ? "time cap reached" : "nothing scheduled") +
             ", " +
             std::to_string(std::count_if(w.messages.begin(), w.messages.end(),
                                          [](const QueuedMessage& m) { return !m.deleted; })) +
             " messages not done");
      return false;
    }
    w.clock.advance_to(*next);
  }
  const auto took = w.now() - *stop_started;
  const auto stats = container->stats();
  w.event("stopped in_flight=" + std::to_string(stats.in_flight) +
          " took_ms=" + std::to_string(std::chrono::duration_cast<Ms>(took).count()));
  // The stop ends within its deadline, or at most the final flush's minimum past it.
  if (took > stop_deadline + kFinalFlushMin)
    w.fail("the stop took " + std::to_string(std::chrono::duration_cast<Ms>(took).count()) +
           " ms, deadline " + std::to_string(stop_deadline.count()) + " ms");
  if (container->stop_failed()) w.fail("the stop sequence failed");
  if (container->handlers_still_running() != 0)
    w.fail(std::to_string(container->handlers_still_running()) +
           " handlers still running after the stop (simulated handlers never block)");
  // Every delivery of this phase is settled, but those the core still holds (a write
  // that never returned, at the stop's deadline): no settlement counted and not sent.
  const auto unsettled =
      std::count_if(w.deliveries.begin(), w.deliveries.end(),
                    [&](const auto& d) { return d.second.phase == w.phase && !d.second.verb; });
  if (unsettled != stats.in_flight)
    w.fail(std::to_string(unsettled) + " deliveries never settled at the source, the core holds " +
           std::to_string(stats.in_flight));
  if (stats.in_flight > 0 && w.phase == 2) {
    w.fail("a stop once drained left " + std::to_string(stats.in_flight) + " messages in flight");
  } else if (stats.in_flight > 0 && took < stop_deadline) {
    w.fail("the stop ended after " + std::to_string(std::chrono::duration_cast<Ms>(took).count()) +
           " ms, before its " + std::to_string(stop_deadline.count()) + " ms deadline, holding " +
           std::to_string(stats.in_flight) + " messages");
  } else if (stats.in_flight > 0) {
    w.drew(Fault::stop_deadline_hit);
  } else if (container->permits_available() != permits_total) {
    w.fail("permits after the stop: " + std::to_string(container->permits_available()) +
           " of max_in_flight " + std::to_string(permits_total));
  }
  if (stats.in_flight_peak > permits_total)
    w.fail("in flight peaked at " + std::to_string(stats.in_flight_peak) + " above max_in_flight " +
           std::to_string(permits_total));
  // Everything not settled belongs to a hung handler or the stop's deadline: the queue
  // delivers it again. Settlements of this phase's deliveries may not come later.
  for (auto& [receipt, d] : w.deliveries)
    if (d.phase == w.phase && !d.verb) d.verb = "abandoned";
  w.outstanding = 0;
  return w.failure.empty();
}

}  // namespace

Outcome run_seed(std::uint64_t seed, const Options& options) {
  runtime::VirtualClock clock(kOrigin, seed ^ 0x5eed);
  runtime::ScopedVirtualClock installed(clock);
  World w(seed, clock, options.keep_log);
  w.shape = draw_shape(w.rng);
  const auto& s = w.shape;
  w.open_failures_left = s.open_failures;
  for (int i = 0; i < s.messages; ++i) {
    QueuedMessage m;
    m.id = "m" + std::to_string(i);
    if (s.groups > 0) {
      const int g = w.rng.between(0, s.groups - 1);
      if (s.fifo || w.rng.chance(0.5)) m.group = "g" + std::to_string(g);
    }
    m.seq = i;
    m.refused_by_database = s.batch_listener && w.rng.chance(s.p_sink_refuses);
    w.messages.push_back(std::move(m));
  }
  w.event("seed " + std::to_string(seed) + " " + describe(s));

  // Phase 1: every fault, and a stop at a drawn moment (or once drained).
  bool ok = run_phase(w, true, s.stop_mid_run, s.stop_deadline, Ms(std::chrono::hours(2)));
  if (s.stop_mid_run) w.drew(Fault::stop_mid_run);
  // Phase 2: a new container on the same queue and database finishes the work, and
  // stops gracefully once the queue is drained.
  if (ok && !w.drained()) {
    w.phase = 2;
    ok = run_phase(w, false, false, Ms(30000), Ms(std::chrono::hours(2)));
  }
  if (ok) {
    // Every message's record written, or the message dead-lettered; none lost.
    for (const auto& m : w.messages)
      if (!m.dead_lettered && !w.committed.count(m.id)) {
        w.fail("message " + m.id + " deleted from the queue but neither written nor dead-lettered");
        break;
      }
  }
  Outcome outcome;
  outcome.ok = w.failure.empty();
  outcome.failure = w.failure;
  outcome.log_hash = w.hash;
  outcome.log = std::move(w.log);
  outcome.faults = w.faults;
  outcome.summary = describe(s);
  return outcome;
}

}  // namespace sluice::sim
