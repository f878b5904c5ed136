// The pure parts of the RabbitMQ source: the ack frames a channel's settlements
// become, the consumer scaling rule, and the URI parser.
#include <gtest/gtest.h>

#include "amqp/ack_tracker.hpp"
#include "amqp/connection.hpp"
#include "amqp/consumer_scaler.hpp"
#include "amqp/stream.hpp"

using namespace sluice::amqp;
using namespace std::chrono_literals;

TEST(AckTracker, MultipleCoversOnlyTheContiguousSettledPrefix) {
  AckTracker t;
  for (std::uint64_t tag = 1; tag <= 6; ++tag) t.delivered(tag);
  t.acked(1);
  t.acked(2);
  t.acked(4);  // 3 still open
  auto f = t.take(false);
  EXPECT_EQ(f.multiple_up_to, 2u);
  EXPECT_TRUE(f.singles.empty());
  EXPECT_EQ(f.acks, 2u);
  EXPECT_EQ(t.waiting(), 1u) << "4 waits behind 3";
  t.finished(3);  // nacked by a frame of its own
  f = t.take(false);
  EXPECT_EQ(f.multiple_up_to, 4u) << "3 is no longer outstanding: one frame covers 4";
  EXPECT_EQ(f.acks, 1u);
  EXPECT_EQ(t.outstanding(), 2u);
}

TEST(AckTracker, SinglesWhenAskedForAcksBehindAGap) {
  AckTracker t;
  for (std::uint64_t tag = 1; tag <= 5; ++tag) t.delivered(tag);
  t.acked(3);
  t.acked(5);
  auto f = t.take(true);
  EXPECT_EQ(f.multiple_up_to, 0u);
  EXPECT_EQ(f.singles, (std::vector<std::uint64_t>{3, 5}));
  EXPECT_EQ(f.acks, 2u);
  t.acked(1);
  t.acked(2);
  f = t.take(false);
  EXPECT_EQ(f.multiple_up_to, 2u) << "3 was acked alone: the prefix ends at the first open (4)";
  EXPECT_EQ(f.acks, 2u);
  t.acked(4);
  f = t.take(false);
  EXPECT_EQ(f.multiple_up_to, 4u);
  EXPECT_EQ(f.acks, 1u) << "5 was acked alone already";
  EXPECT_TRUE(t.empty());
}

TEST(AckTracker, UnknownAndRepeatedSettlementsAreIgnored) {
  AckTracker t;
  t.delivered(1);
  t.acked(7);
  t.acked(1);
  t.finished(1);  // too late: already acked
  auto f = t.take(false);
  EXPECT_EQ(f.multiple_up_to, 1u);
  EXPECT_EQ(f.acks, 1u);
  t.acked(1);
  EXPECT_EQ(t.take(true).acks, 0u);
}

TEST(AckTracker, SaysWhichDeliveriesWereHeldSinceWhen) {
  AckTracker t;
  const AckTracker::Clock::time_point t0{};
  t.delivered(1, t0 + 1s, "a");
  t.delivered(2, t0 + 2s, "b");
  t.delivered(3, t0 + 3s, "c");
  t.delivered(4, t0 + 4s, "d");
  t.acked(1);  // acked, not yet sent: still unacknowledged on the broker
  t.finished(2);
  auto held = t.held_since(t0 + 3500ms);
  ASSERT_EQ(held.size(), 2u) << "2 is settled, 4 came later";
  EXPECT_EQ(held[0].tag, 1u);
  EXPECT_EQ(held[0].id, "a");
  EXPECT_EQ(held[1].tag, 3u);
  EXPECT_EQ(held[1].since, t0 + 3s);
  t.take(true);
  EXPECT_EQ(t.held_since(t0 + 10s).size(), 2u) << "3 and 4 stay open";
}

TEST(ConsumerTimeout, TheBrokersCloseIsRecognizedWithItsTimeout) {
  // RabbitMQ 3.10's and 4.x's text.
  const auto timeout = consumer_timeout_of(
      406,
      "PRECONDITION_FAILED - delivery acknowledgement on channel 3 timed out. Timeout value "
      "used: 1800000 ms. This timeout value can be configured, see consumers doc guide to learn "
      "more");
  ASSERT_TRUE(timeout.has_value());
  EXPECT_EQ(*timeout, 1800000ms);
  EXPECT_EQ(consumer_timeout_of(406,
                                "PRECONDITION_FAILED - delivery acknowledgement on channel 1 "
                                "timed out"),
            0ms)
      << "recognized, the timeout unnamed";
  EXPECT_EQ(consumer_timeout_of(406, "PRECONDITION_FAILED - unknown delivery tag 9"), std::nullopt);
  EXPECT_EQ(consumer_timeout_of(406, "PRECONDITION_FAILED - inequivalent arg 'x-queue-type'"),
            std::nullopt);
  EXPECT_EQ(consumer_timeout_of(404, "delivery acknowledgement timed out"), std::nullopt);
  EXPECT_EQ(consumer_timeout_of(406,
                                "delivery acknowledgement timed out. Timeout value used: "
                                "99999999999999999999999 ms"),
            0ms)
      << "a number past 64 bits is not wrapped";
}

namespace {
ConsumerScaler::Config config() {
  ConsumerScaler::Config c;
  c.min_consumers = 1;
  c.max_consumers = 3;
  c.start_interval = 0ms;
  c.stop_interval = 0ms;
  return c;  // triggers 10 and 10, batch_size 1, receive_timeout 1 s
}
using Decision = ConsumerScaler::Decision;
}  // namespace

TEST(ConsumerScaler, StartsAnotherOnTheTenthActiveCycleExactly) {
  ConsumerScaler s(config());
  ConsumerScaler::Cycle cycle;
  auto now = ConsumerScaler::Clock::now();
  s.begin(cycle, now);
  for (int i = 1; i <= 9; ++i) EXPECT_EQ(s.on_delivery(cycle, 1, now), Decision::keep) << i;
  EXPECT_EQ(s.on_delivery(cycle, 1, now), Decision::start_another);
  // The counter starts again.
  for (int i = 1; i <= 9; ++i) EXPECT_EQ(s.on_delivery(cycle, 2, now), Decision::keep) << i;
  EXPECT_EQ(s.on_delivery(cycle, 2, now), Decision::start_another);
  for (int i = 1; i <= 10; ++i) EXPECT_EQ(s.on_delivery(cycle, 3, now), Decision::keep) << "at max";
}

TEST(ConsumerScaler, AnIdleCycleIsAReceiveTimeoutWithNothingHeld) {
  ConsumerScaler s(config());
  ConsumerScaler::Cycle cycle;
  auto now = ConsumerScaler::Clock::now();
  s.begin(cycle, now);
  EXPECT_EQ(s.on_tick(cycle, 2, false, now + 999ms), Decision::keep) << "not timed out yet";
  for (int i = 1; i <= 9; ++i) {
    now += 1s;
    EXPECT_EQ(s.on_tick(cycle, 2, false, now), Decision::keep) << i;
  }
  now += 1s;
  EXPECT_EQ(s.on_tick(cycle, 2, false, now), Decision::stop_this);
  // Holding unsettled deliveries: neither idle nor active, never stopped.
  for (int i = 1; i <= 30; ++i) {
    now += 1s;
    EXPECT_EQ(s.on_tick(cycle, 2, true, now), Decision::keep) << i;
  }
  // At the minimum, idle cycles stop nothing.
  for (int i = 1; i <= 30; ++i) {
    now += 1s;
    EXPECT_EQ(s.on_tick(cycle, 1, false, now), Decision::keep) << i;
  }
}

TEST(ConsumerScaler, BatchSizeDeliveriesEndACycleAndIntervalsAreKept) {
  auto c = config();
  c.batch_size = 4;
  c.active_trigger = 2;
  c.start_interval = 10s;
  ConsumerScaler s(c);
  ConsumerScaler::Cycle cycle;
  auto now = ConsumerScaler::Clock::now() + 1h;
  s.begin(cycle, now);
  for (int i = 1; i <= 7; ++i) EXPECT_EQ(s.on_delivery(cycle, 1, now), Decision::keep) << i;
  EXPECT_EQ(s.on_delivery(cycle, 1, now), Decision::start_another) << "2 cycles of 4";
  for (int i = 1; i <= 8; ++i)
    EXPECT_EQ(s.on_delivery(cycle, 2, now + 5s), Decision::keep) << "within start_interval";
  for (int i = 1; i <= 7; ++i) EXPECT_EQ(s.on_delivery(cycle, 2, now + 11s), Decision::keep);
  EXPECT_EQ(s.on_delivery(cycle, 2, now + 11s), Decision::start_another);
  // A lowered maximum stops consumers at their next cycle's end.
  s.reconfigure(1, 1);
  for (int i = 1; i <= 3; ++i) EXPECT_EQ(s.on_delivery(cycle, 3, now + 12s), Decision::keep);
  EXPECT_EQ(s.on_delivery(cycle, 3, now + 12s), Decision::stop_this);
}

TEST(AmqpUri, PartsAreDecodedAndThePasswordNeverShown) {
  auto u = parse_uri("amqps://us%40er:p%2Fss@broker.example:5999/prod%2fa");
  EXPECT_TRUE(u.tls);
  EXPECT_EQ(u.user, "us@er");
  EXPECT_EQ(u.password, "p/ss");
  EXPECT_EQ(u.host, "broker.example");
  EXPECT_EQ(u.port, 5999);
  EXPECT_EQ(u.vhost, "prod/a");
  EXPECT_EQ(u.redacted.find("p%2Fss"), std::string::npos);
  auto d = parse_uri("amqp://h");
  EXPECT_EQ(d.port, 5672);
  EXPECT_EQ(d.vhost, "/");
  EXPECT_EQ(d.user, "guest");
  EXPECT_EQ(parse_uri("amqp://[::1]:5673/%2f").host, "::1");
  EXPECT_EQ(parse_uri("amqp://u:p@:5673").host, "localhost")
      << "RabbitMQ's spec: no host is localhost";
  for (const char* bad :
       {"http://u:topsecret@h/", "amqp://u:topsecret@h:0/", "amqp://u:topsecret@h:99999/",
        "amqp://u:topsecret@h/a/b", "amqp://u:topsecret@h/?heartbeat=5", "amqp://u:topsecret@h:5x/",
        "amqp://u:top%zzsecret@h/"}) {
    try {
      parse_uri(bad);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()).find("topsecret"), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find("top%zz"), std::string::npos) << e.what();
    }
  }
}

TEST(StreamStart, NamedPlacesOffsetsAndUtcTimes) {
  using Kind = StreamStart::Kind;
  EXPECT_EQ(parse_stream_start("first")->kind, Kind::first);
  EXPECT_EQ(parse_stream_start("last")->kind, Kind::last);
  EXPECT_EQ(parse_stream_start("next")->kind, Kind::next);
  const auto offset = parse_stream_start("9223372036854775807");
  ASSERT_TRUE(offset);
  EXPECT_EQ(offset->kind, Kind::offset);
  EXPECT_EQ(offset->value, INT64_MAX);
  const auto time = parse_stream_start("2026-12-01T08:00:00Z");
  ASSERT_TRUE(time);
  EXPECT_EQ(time->kind, Kind::timestamp);
  EXPECT_EQ(time->value, 1796112000);
  EXPECT_EQ(parse_stream_start("2024-02-29T00:00:00Z")->value, 1709164800);
  for (const char* bad : {"", "First", "-1", "1.5", "9223372036854775808", "2026-02-29T00:00:00Z",
                          "2026-13-01T00:00:00Z", "2026-12-01T24:00:00Z", "2026-12-01T08:00:00+01",
                          "2026-12-01t08:00:00Z", "1969-12-31T23:59:59Z", " 2026-12-01T08:00:00Z"})
    EXPECT_FALSE(parse_stream_start(bad)) << bad;
}

TEST(StreamStart, TheConsumeArgumentAndTheDeliveryHeader) {
  amqp_table_entry_t entry{};
  stream_offset_argument({StreamStart::Kind::offset, 42}, entry);
  EXPECT_EQ(text(entry.key), "x-stream-offset");
  EXPECT_EQ(entry.value.kind, AMQP_FIELD_KIND_I64);
  EXPECT_EQ(entry.value.value.i64, 42);
  stream_offset_argument({StreamStart::Kind::first, 0}, entry);
  EXPECT_EQ(entry.value.kind, AMQP_FIELD_KIND_UTF8);
  EXPECT_EQ(text(entry.value.value.bytes), "first");
  stream_offset_argument({StreamStart::Kind::timestamp, 1796112000}, entry);
  EXPECT_EQ(entry.value.kind, AMQP_FIELD_KIND_TIMESTAMP);
  EXPECT_EQ(entry.value.value.u64, 1796112000u);

  amqp_basic_properties_t properties{};
  EXPECT_FALSE(stream_offset_of(properties)) << "no headers";
  amqp_table_entry_t headers[2]{};
  headers[0].key = amqp_cstring_bytes("x-other");
  headers[0].value.kind = AMQP_FIELD_KIND_I64;
  headers[0].value.value.i64 = 7;
  headers[1].key = amqp_cstring_bytes("x-stream-offset");
  headers[1].value.kind = AMQP_FIELD_KIND_I64;
  headers[1].value.value.i64 = 123456789012;
  properties._flags = AMQP_BASIC_HEADERS_FLAG;
  properties.headers = {2, headers};
  EXPECT_EQ(stream_offset_of(properties), 123456789012);
  headers[1].value.kind = AMQP_FIELD_KIND_U64;
  headers[1].value.value.u64 = static_cast<std::uint64_t>(INT64_MAX) + 1;
  EXPECT_FALSE(stream_offset_of(properties)) << "never wrapped";
  headers[1].value.kind = AMQP_FIELD_KIND_UTF8;
  headers[1].value.value.bytes = amqp_cstring_bytes("12");
  EXPECT_FALSE(stream_offset_of(properties)) << "not a number's kind";
}
