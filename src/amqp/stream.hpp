#pragma once
// A RabbitMQ stream (x-queue-type: stream) read over AMQP 0-9-1: where a consumer
// starts (the x-stream-offset consume argument) and where each delivery is (its
// x-stream-offset header). The broker keeps no position for such consumers: the
// source tracks the offsets it has handled and keeps them in a PositionStore.
#include <amqp.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace sluice::amqp {

struct StreamStart {
  enum class Kind { first, last, next, offset, timestamp };
  Kind kind = Kind::next;
  std::int64_t value = 0;  // the offset, or seconds since the epoch
};

// "first", "last", "next", an offset ("12345") or a UTC time ("2026-12-01T08:00:00Z");
// nullopt for anything else.
std::optional<StreamStart> parse_stream_start(std::string_view text);

// The consume argument, in `entry` (whose key and bytes point to static storage).
void stream_offset_argument(const StreamStart& start, amqp_table_entry_t& entry);

// The delivery's x-stream-offset header; nullopt when it has none (not a stream).
std::optional<std::int64_t> stream_offset_of(const amqp_basic_properties_t& properties);

}  // namespace sluice::amqp
