#pragma once
// An in-process source for tests of the container core's pure logic: messages come
// from a deque, settlements are recorded, and the test can declare a lease lost. It
// hands out several messages of one group in one receive, as SQS FIFO does (the
// emulator gives one per group per receive, so it cannot show the core's ordering).

#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "runtime/message_state.hpp"
#include "sluice/spi/source.hpp"

namespace sluice::test {

struct FakeQueue {
  struct Item {
    std::string body;
    std::optional<std::string> group;
    bool settled_by_the_source = false;  // released before the core takes it
    std::vector<std::pair<std::string, std::string>> attributes, headers;
  };
  std::mutex mutex;
  std::deque<Item> ready;
  std::vector<std::string> acked, retried, released, rejected;
  std::uint64_t lease = 1;  // the lease new deliveries are held under
  int max_batch = 10;
  bool ordered_groups = false;
  int throws_left = 0;  // receives that throw something that is not a std::exception
  // As an SQS FIFO queue: a group with messages in flight (received, not yet acked,
  // retried, released or rejected) gives none, and retried and released messages come
  // back in the order they were pushed. For bodies that are unique.
  bool fifo = false;
  std::map<std::string, std::uint64_t> pushed_as;  // body -> its place, with fifo
  std::map<std::string, int> in_flight;            // group -> messages in flight, with fifo
  std::map<std::string, int> ready_of;             // group -> messages ready, with fifo
  spi::SourceContext context;

  void push(Item item) {
    std::lock_guard lock(mutex);
    if (fifo) {
      pushed_as.emplace(item.body, pushed_as.size());
      if (item.group) ++ready_of[*item.group];
    }
    ready.push_back(std::move(item));
  }
  void push(std::string body, std::optional<std::string> group = std::nullopt,
            bool settled_by_the_source = false) {
    push(Item{std::move(body), std::move(group), settled_by_the_source, {}, {}});
  }
  // With fifo: back among the ready ones, in its place (under mutex).
  void put_back(std::string body, std::optional<std::string> group) {
    const auto place = pushed_as.at(body);
    auto at = std::find_if(ready.begin(), ready.end(),
                           [&](const Item& item) { return pushed_as.at(item.body) > place; });
    if (group) ++ready_of[*group];
    ready.insert(at, Item{std::move(body), std::move(group), false, {}, {}});
  }
  // The lease is gone (a channel closed): its messages will be delivered again.
  void lose_lease() {
    std::uint64_t lost = 0;
    {
      std::lock_guard lock(mutex);
      lost = lease++;
    }
    context.lease_lost(lost);
  }
  std::size_t count(const std::vector<std::string>& v) {
    std::lock_guard lock(mutex);
    return v.size();
  }
};

class FakeSource final : public spi::Source {
 public:
  FakeSource(std::shared_ptr<FakeQueue> queue, const spi::SourceContext& context)
      : queue_(std::move(queue)), executor_(context.executor) {
    queue_->context = context;
  }
  boost::asio::awaitable<void> open() override { co_return; }
  spi::SourceCapabilities capabilities() const override {
    spi::SourceCapabilities c;
    c.ordered_groups = queue_->ordered_groups;
    c.max_batch = queue_->max_batch;
    return c;
  }
  boost::asio::awaitable<std::vector<spi::Delivery>> receive(int max) override {
    {
      std::lock_guard lock(queue_->mutex);
      if (queue_->throws_left > 0) {
        --queue_->throws_left;
        throw 42;
      }
    }
    for (;;) {
      std::vector<spi::Delivery> states;
      {
        std::lock_guard lock(queue_->mutex);
        // With fifo: the first messages of groups not in flight (SQS returns several of
        // one group at once). A look at the first few thousand only, as SQS looks at part
        // of a queue, and none when every group with messages is in flight.
        std::vector<std::size_t> picked;
        if (queue_->fifo) {
          const auto free = [&](const std::string& group) {
            const auto it = queue_->in_flight.find(group);
            return it == queue_->in_flight.end() || it->second == 0;
          };
          std::size_t grouped = 0;
          bool any = false;  // a message ready that may be given
          for (const auto& [group, n] : queue_->ready_of) {
            grouped += static_cast<std::size_t>(n);
            any = any || (n > 0 && free(group));
          }
          any = any || queue_->ready.size() > grouped;
          if (any)
            for (std::size_t i = 0;
                 i < queue_->ready.size() && i < 4096 && static_cast<int>(picked.size()) < max;
                 ++i) {
              const auto& group = queue_->ready[i].group;
              if (!group || free(*group)) picked.push_back(i);
            }
        } else {
          for (std::size_t i = 0; i < queue_->ready.size() && static_cast<int>(picked.size()) < max;
               ++i)
            picked.push_back(i);
        }
        for (const std::size_t i : picked) {
          auto& item = queue_->ready[i];
          if (queue_->fifo && item.group) {
            --queue_->ready_of[*item.group];
            ++queue_->in_flight[*item.group];
          }
          builder_.id(item.body).body(item.body).lease(queue_->lease);
          if (item.group) builder_.group(*item.group);
          for (const auto& [name, value] : item.attributes) builder_.attribute(name, value);
          for (const auto& [name, value] : item.headers) builder_.header(name, value);
          auto s = builder_.build();
          // A source settling a message before the core has it (no public verb does).
          if (item.settled_by_the_source) detail::settle_once(s, detail::Outcome::release);
          states.push_back(std::move(s));
        }
        for (auto i = picked.rbegin(); i != picked.rend(); ++i)
          queue_->ready.erase(queue_->ready.begin() + static_cast<std::ptrdiff_t>(*i));
      }
      if (!states.empty()) co_return states;
      boost::asio::steady_timer timer(executor_, std::chrono::milliseconds(2));
      auto [ec] = co_await timer.async_wait(boost::asio::as_tuple(boost::asio::use_awaitable));
      if (ec) throw spi::SourceError(spi::SourceErrorKind::cancelled, "", "cancelled");
    }
  }
  void ack(const spi::Delivery& s) override { record(queue_->acked, s); }
  void retry(const spi::Delivery& s, std::chrono::milliseconds) override {
    record(queue_->retried, s, true);
  }
  void release(const spi::Delivery& s) override { record(queue_->released, s, true); }
  boost::asio::awaitable<bool> reject(spi::Delivery s, std::string) override {
    record(queue_->rejected, s);
    co_return false;
  }
  boost::asio::awaitable<void> flush() override { co_return; }
  std::string describe() const override { return "fake"; }
  std::string message_source() const override { return "fake"; }
  std::string messaging_system() const override { return "fake"; }
  std::string destination_name() const override { return "fake-queue"; }

 private:
  // A settlement, recorded; with fifo, the group has one fewer in flight and a message
  // given back goes back in its place.
  void record(std::vector<std::string>& where, const spi::Delivery& s, bool again = false) {
    std::lock_guard lock(queue_->mutex);
    where.push_back(spi::body_of(s));
    if (!queue_->fifo) return;
    const auto group = spi::group_of(s);
    if (group) --queue_->in_flight[std::string(*group)];
    if (again)
      queue_->put_back(spi::body_of(s), group ? std::optional<std::string>(*group) : std::nullopt);
  }
  std::shared_ptr<FakeQueue> queue_;
  boost::asio::any_io_executor executor_;
  spi::DeliveryBuilder builder_;  // under the queue's mutex
};

inline SourceFactory fake_source(std::shared_ptr<FakeQueue> queue) {
  return [queue](const spi::SourceContext& context) {
    return std::unique_ptr<spi::Source>(std::make_unique<FakeSource>(queue, context));
  };
}

}  // namespace sluice::test
