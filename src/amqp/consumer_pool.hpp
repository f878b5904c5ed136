#pragma once
// The consumers of the RabbitMQ source's connection, on the connection thread. Each
// consumer has its own channel, its own prefetch (basic.qos per consumer: quorum
// queues refuse a channel-wide one) and its own ack tracker (delivery tags die with
// their channel). Its lease is its channel's incarnation: when the channel closes,
// the container drops what it held under that lease.
//
// Prefetch: a new consumer may have its share (max_in_flight / MAX consumers, at most
// `prefetch`), within what the consumers already running leave of max_in_flight, so
// the sum never passes max_in_flight; a consumer keeps the prefetch it started with.
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "amqp/ack_tracker.hpp"
#include "amqp/connection.hpp"
#include "amqp/consumer_scaler.hpp"

namespace sluice::amqp {

struct Consumer {
  std::uint16_t channel = 0;
  std::uint64_t lease = 0;
  int prefetch = 0;
  std::string tag;
  AckTracker acks;
  ConsumerScaler::Cycle cycle;
  std::size_t held_retries = 0;
  bool cancelling = false;  // basic.cancel sent (scale-down or stop)
  bool cancel_confirmed = false;
  std::chrono::steady_clock::time_point acks_waiting_since{};
};

class ConsumerPool {
 public:
  struct Settings {
    std::string queue;
    std::string tag_prefix;  // consumer tags are tag_prefix-<lease>
    int prefetch = 1;
    int batch_size = 1;
    int max_in_flight = 100;
  };
  ConsumerPool(Settings settings, ConsumerScaler& scaler)
      : settings_(std::move(settings)), scaler_(scaler) {}

  // Starts one more consumer; false when max_in_flight has no room for it yet
  // (consumers being cancelled still hold theirs). Throws AmqpError.
  bool start(Connection& connection, const amqp_table_t& arguments = amqp_empty_table);
  std::uint64_t latest_lease() const { return next_lease_; }  // the last consumer started
  // Stops new deliveries; the channel stays open until what it delivered is settled
  // (never in the middle of a message), then close_finished() closes it.
  void cancel(Connection& connection, Consumer& consumer);
  // Closes the channels of cancelled consumers whose cancel the broker confirmed and
  // that hold nothing (`holds(lease)`: deliveries not yet handed to the container).
  void close_finished(Connection& connection, const std::function<bool(std::uint64_t)>& holds);
  // The consumer on `channel` is gone with its channel: removed and returned.
  std::unique_ptr<Consumer> remove(std::uint16_t channel);

  Consumer* on_channel(std::uint16_t channel);
  Consumer* by_lease(std::uint64_t lease);
  std::vector<std::uint16_t> channels() const;
  std::vector<Consumer*> running();  // not cancelling
  template <class F>
  void for_each(F&& f) {
    for (auto& [channel, consumer] : consumers_) f(*consumer);
  }

  int active() const;               // consumers not cancelling
  std::size_t outstanding() const;  // deliveries held unacknowledged, all consumers
  int prefetch_share() const;
  // The next channel number not in use, round robin up to the negotiated maximum.
  std::uint16_t free_channel(Connection* connection);

  int wanted = 0;  // consumers to run (scaled up and down between MIN and MAX)

 private:
  int next_prefetch() const;
  Settings settings_;
  ConsumerScaler& scaler_;
  std::map<std::uint16_t, std::unique_ptr<Consumer>> consumers_;
  std::unordered_map<std::uint64_t, Consumer*> by_lease_;
  std::uint64_t next_lease_ = 0;
  int next_channel_ = 0;
};

}  // namespace sluice::amqp
