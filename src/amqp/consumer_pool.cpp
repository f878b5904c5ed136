#include "amqp/consumer_pool.hpp"

#include <algorithm>

namespace sluice::amqp {
using Clock = std::chrono::steady_clock;

namespace {
// After a channel error in a synchronous call the broker waits for close-ok.
void answer_channel_close(Connection& connection, std::uint16_t channel) {
  amqp_channel_close_ok_t ok{};
  try {
    connection.send_method(channel, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok);
  } catch (const AmqpError&) {
  }
}
}  // namespace

bool ConsumerPool::start(Connection& connection, const amqp_table_t& arguments) {
  const int prefetch = next_prefetch();
  if (prefetch < 1) return false;
  const std::uint16_t channel = free_channel(&connection);
  connection.open_channel(channel);
  try {
    connection.qos(channel, static_cast<std::uint16_t>(prefetch), false);
    auto consumer = std::make_unique<Consumer>();
    consumer->prefetch = prefetch;
    consumer->channel = channel;
    consumer->lease = ++next_lease_;
    consumer->tag =
        connection.consume(channel, settings_.queue,
                           settings_.tag_prefix + "-" + std::to_string(consumer->lease), arguments);
    scaler_.begin(consumer->cycle, Clock::now());
    by_lease_[consumer->lease] = consumer.get();
    consumers_[channel] = std::move(consumer);
  } catch (const AmqpError& e) {
    if (e.kind() == AmqpError::Kind::channel) answer_channel_close(connection, channel);
    throw;
  }
  return true;
}

void ConsumerPool::cancel(Connection& connection, Consumer& consumer) {
  consumer.cancelling = true;
  connection.cancel(consumer.channel, consumer.tag);
}

void ConsumerPool::close_finished(Connection& connection,
                                  const std::function<bool(std::uint64_t)>& holds) {
  for (auto it = consumers_.begin(); it != consumers_.end();) {
    auto& c = *it->second;
    if (c.cancelling && c.cancel_confirmed && c.acks.empty() && c.held_retries == 0 &&
        !holds(c.lease)) {
      connection.close_channel(c.channel);
      by_lease_.erase(c.lease);
      it = consumers_.erase(it);
    } else {
      ++it;
    }
  }
}

std::unique_ptr<Consumer> ConsumerPool::remove(std::uint16_t channel) {
  auto it = consumers_.find(channel);
  if (it == consumers_.end()) return nullptr;
  auto consumer = std::move(it->second);
  by_lease_.erase(consumer->lease);
  consumers_.erase(it);
  return consumer;
}

Consumer* ConsumerPool::on_channel(std::uint16_t channel) {
  auto it = consumers_.find(channel);
  return it == consumers_.end() ? nullptr : it->second.get();
}

Consumer* ConsumerPool::by_lease(std::uint64_t lease) {
  auto it = by_lease_.find(lease);
  return it == by_lease_.end() ? nullptr : it->second;
}

std::vector<std::uint16_t> ConsumerPool::channels() const {
  std::vector<std::uint16_t> out;
  for (auto& [channel, consumer] : consumers_) out.push_back(channel);
  return out;
}

std::vector<Consumer*> ConsumerPool::running() {
  std::vector<Consumer*> out;
  for (auto& [channel, consumer] : consumers_)
    if (!consumer->cancelling) out.push_back(consumer.get());
  return out;
}

int ConsumerPool::active() const {
  int n = 0;
  for (auto& [channel, consumer] : consumers_) n += !consumer->cancelling;
  return n;
}

std::size_t ConsumerPool::outstanding() const {
  std::size_t n = 0;
  for (auto& [channel, consumer] : consumers_) n += consumer->acks.outstanding();
  return n;
}

int ConsumerPool::prefetch_share() const {
  return std::clamp(std::min(std::max(settings_.prefetch, settings_.batch_size),
                             settings_.max_in_flight / std::max(1, scaler_.config().max_consumers)),
                    1, 65535);
}

int ConsumerPool::next_prefetch() const {
  int used = 0;
  for (auto& [channel, consumer] : consumers_) used += consumer->prefetch;
  return std::min(prefetch_share(), settings_.max_in_flight - used);
}

// Round robin: a number just closed is not reused at once, so a frame still on its way
// for the old channel can never be taken for the new one's.
std::uint16_t ConsumerPool::free_channel(Connection* connection) {
  const int max = std::max(2, connection ? amqp_get_channel_max(connection->raw()) : 2047);
  for (int tries = 0; tries < max; ++tries) {
    next_channel_ = next_channel_ >= max ? 1 : next_channel_ + 1;
    if (!consumers_.count(static_cast<std::uint16_t>(next_channel_)))
      return static_cast<std::uint16_t>(next_channel_);
  }
  throw AmqpError(AmqpError::Kind::channel, 0, "no free channel");
}

}  // namespace sluice::amqp
