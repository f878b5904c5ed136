// The RabbitMQ source and publisher against a real broker (Debian's rabbitmq-server,
// started by the test process on private loopback ports). Counts come from the
// broker itself (rabbitmqctl list_queues) wherever the claim is about the broker.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "amqp/connection.hpp"
#include "sluice/amqp/publisher.hpp"
#include "sluice/amqp/source.hpp"
#include "sluice/container.hpp"
#include "support/emulator.hpp"
#include "support/rabbitmq.hpp"
#include "support/wait.hpp"

using namespace sluice;
using namespace std::chrono_literals;
using test::RabbitMq;
using test::wait_until;

namespace {

// Declares queues (and their dead-letter plumbing) through our own connection.
struct Admin {
  explicit Admin(const std::string& uri) {
    amqp::ConnectionOptions o;
    o.uri = amqp::parse_uri(uri);
    o.connection_name = "sluice-test-admin";
    connection = std::make_unique<amqp::Connection>(o);
    connection->open_channel(1);
  }
  void queue(const std::string& name, bool quorum = false, const std::string& dlx = "") {
    connection->declare_queue(1, name, quorum, dlx);
  }
  void remove(const std::string& name) { connection->delete_queue(1, name); }
  // A fanout exchange delivering to `queue`.
  void fanout_to(const std::string& exchange, const std::string& queue) {
    amqp_exchange_declare(connection->raw(), 1, amqp_cstring_bytes(exchange.c_str()),
                          amqp_cstring_bytes("fanout"), 0, 1, 0, 0, amqp_empty_table);
    connection->check_reply("exchange.declare");
    amqp_queue_bind(connection->raw(), 1, amqp_cstring_bytes(queue.c_str()),
                    amqp_cstring_bytes(exchange.c_str()), amqp_cstring_bytes(""), amqp_empty_table);
    connection->check_reply("queue.bind");
  }
  std::unique_ptr<amqp::Connection> connection;
};

std::vector<amqp::OutgoingMessage> events(const std::string& queue, int count, int first = 0) {
  std::vector<amqp::OutgoingMessage> out;
  for (int i = first; i < first + count; ++i) {
    amqp::OutgoingMessage m;
    m.routing_key = queue;
    m.message_id = "m-" + std::to_string(i);
    m.body = R"({"n":)" + std::to_string(i) + "}";
    out.push_back(std::move(m));
  }
  return out;
}

void publish(const std::string& queue, int count, int first = 0) {
  amqp::PublisherOptions o;
  o.uri = RabbitMq::shared().uri();
  amqp::Publisher publisher(o);
  const auto report = publisher.publish("", events(queue, count, first));
  ASSERT_EQ(report.confirmed, static_cast<std::size_t>(count));
  ASSERT_TRUE(report.ok());
}

// Metrics a source reports (consumers, ack frames...), as the container passes them on.
class Gauges : public ContainerObserver {
 public:
  void on_source_gauge(const std::string& name, double value) override {
    std::lock_guard lock(m_);
    values_[name] = value;
    if (name == "amqp_consumers") peak_consumers_ = std::max(peak_consumers_, value);
  }
  double get(const std::string& name) {
    std::lock_guard lock(m_);
    return values_.count(name) ? values_[name] : -1;
  }
  double peak_consumers() {
    std::lock_guard lock(m_);
    return peak_consumers_;
  }

 private:
  std::mutex m_;
  std::map<std::string, double> values_;
  double peak_consumers_ = 0;
};

class AmqpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    broker_ = &RabbitMq::shared();
    admin_ = std::make_unique<Admin>(broker_->uri());
    queue_ = test::unique_queue_name("amqp");
    admin_->queue(queue_);
  }
  AmqpSourceOptions source_options() const {
    AmqpSourceOptions o;
    o.uri = broker_->uri();
    o.queue = queue_;
    o.receive_timeout = 200ms;
    o.recovery_interval = 1s;
    return o;
  }
  static ContainerOptions container_options(int max_in_flight = 100) {
    ContainerOptions o;
    o.max_in_flight = max_in_flight;
    o.failure_backoff_base = 200ms;
    o.shutdown_deadline = 10s;
    return o;
  }
  RabbitMq* broker_ = nullptr;
  std::unique_ptr<Admin> admin_;
  std::string queue_;
};

}  // namespace

TEST_F(AmqpTest, DrainsEveryMessageOnceWithMultipleAcks) {
  publish(queue_, 3000);
  std::mutex m;
  std::multiset<std::string> seen;
  auto gauges = std::make_shared<Gauges>();
  auto options = source_options();
  options.min_consumers = options.max_consumers = 2;
  Container container(container_options(500), make_amqp_source(options), [&](Message& message) {
    std::lock_guard lock(m);
    seen.insert(message.id());
  });
  container.set_observer(gauges);
  container.start();
  ASSERT_TRUE(wait_until([&] { return container.stats().acked == 3000; }, 60s))
      << "acked " << container.stats().acked;
  container.stop();
  EXPECT_EQ(seen.size(), 3000u);
  EXPECT_EQ(std::set<std::string>(seen.begin(), seen.end()).size(), 3000u) << "a duplicate";
  const auto q = broker_->queue(queue_);
  EXPECT_EQ(q.ready, 0);
  EXPECT_EQ(q.unacked, 0);
  // basic.ack with multiple=true: far fewer frames than messages.
  const double frames = gauges->get("amqp_ack_frames");
  EXPECT_GT(frames, 0);
  EXPECT_LT(frames, 3000 / 4) << "acks were not batched";
}

TEST_F(AmqpTest, UnacknowledgedNeverExceedsMaxInFlight) {
  publish(queue_, 1000);
  auto options = source_options();
  options.min_consumers = options.max_consumers = 4;  // 4 x 250 prefetch, against 20
  Container container(container_options(20), make_amqp_source(options),
                      [&](Message&) { std::this_thread::sleep_for(100ms); });
  container.start();
  long peak = 0;
  int samples = 0;
  while (container.stats().acked < 900 && samples < 200) {
    const auto q = broker_->queue(queue_);
    peak = std::max(peak, q.unacked);
    ++samples;
  }
  ASSERT_TRUE(wait_until([&] { return container.stats().acked == 1000; }, 60s));
  container.stop();
  EXPECT_GT(peak, 0) << "never saw the consumers at work";
  EXPECT_LE(peak, 20) << "the broker held more unacknowledged deliveries than max_in_flight";
}
