// A RabbitMQ stream read by the source: where a consumer starts (the saved offset or
// source.rabbitmq.stream_offset), which offsets are done and saved, and redeliveries.

#include <algorithm>
#include <charconv>

#include "amqp/amqp_source.hpp"

namespace sluice::amqp_source {

void AmqpSource::load_stream_position() {
  if (!stream_ || stream_loaded_ || !context_.positions) return;
  // Two keys: the source's own (saved apart, from what is settled) and the one each
  // batch saves with its rows; each alone is never ahead of the rows, so the further.
  std::optional<std::int64_t> done;
  std::string said;
  for (const auto& key : {position_key_, runtime::with_rows_key(position_key_)}) {
    std::optional<std::string> stored;
    try {
      stored = context_.positions->load(key);
    } catch (const std::exception& e) {
      throw amqp::AmqpError(amqp::AmqpError::Kind::connection, 0,
                            "reading the stream's saved position (" + key + "): " + e.what());
    }
    said += (said.empty() ? "" : " ") +
            std::string(key == position_key_ ? "saved=" : "with_rows=") +
            (stored ? *stored : std::string("none"));
    if (!stored) continue;
    std::int64_t offset = -1;
    const auto [end, error] =
        std::from_chars(stored->data(), stored->data() + stored->size(), offset);
    if (error != std::errc() || end != stored->data() + stored->size() || offset < -1)
      throw amqp::AmqpError(amqp::AmqpError::Kind::connection, 0,
                            "the stream's saved position (" + key + ") is '" +
                                stored->substr(0, 40) +
                                "', expected an offset: delete that row to start from "
                                "source.rabbitmq.stream_offset");
    done = std::max(done.value_or(offset), offset);
  }
  if (done) stream_done_ = done;
  stream_loaded_ = true;
  spdlog::info("amqp event=stream_position source=\"{}\" key=\"{}\" {} from={}", describe_,
               position_key_, said, done ? std::to_string(*done + 1) : options_.stream_offset);
}

void AmqpSource::stream_settled(std::uint64_t lease, std::uint64_t tag) {
  if (!stream_) return;
  MutexLock lock(stream_mutex_);
  if (lease != stream_lease_) return;
  // Settled here, or already when its batch was written (written()).
  stream_tracker_.settled(tag);
  if (stream_tracker_.done_sequence() > 0)
    stream_done_ = static_cast<std::int64_t>(stream_tracker_.done_position());
}

namespace {
// The delivery tags of the stream consumer's (`lease`) deliveries in `batch`, sorted:
// those of a consumer since lost are read again.
std::vector<std::uint64_t> tags_of(std::span<const spi::Delivery> batch, std::uint64_t lease) {
  std::vector<std::uint64_t> tags;
  tags.reserve(batch.size());
  for (const auto& delivery : batch) {
    if (spi::lease_of(delivery) != lease) continue;
    const auto receipt = spi::receipt_of(delivery);
    std::uint64_t tag = 0;
    if (std::from_chars(receipt.data(), receipt.data() + receipt.size(), tag).ec == std::errc())
      tags.push_back(tag);
  }
  std::sort(tags.begin(), tags.end());
  return tags;
}
}  // namespace

void AmqpSource::written(std::span<const spi::Delivery> batch) {
  MutexLock lock(stream_mutex_);
  for (const auto tag : tags_of(batch, stream_lease_)) stream_tracker_.settled(tag);
}

std::optional<PositionUpdate> AmqpSource::done_with(std::span<const spi::Delivery> batch) {
  MutexLock lock(stream_mutex_);
  const auto tags = tags_of(batch, stream_lease_);
  const auto done = stream_tracker_.done_with(
      [&](std::uint64_t tag) { return std::binary_search(tags.begin(), tags.end(), tag); });
  if (!done) return std::nullopt;
  return PositionUpdate{runtime::with_rows_key(position_key_),
                        std::to_string(static_cast<std::int64_t>(done->second))};
}

void AmqpSource::save_stream_position(bool now) {
  if (!stream_ || !stream_done_) return;
  if (stream_done_ != reported_offset_) {
    reported_offset_ = stream_done_;
    gauge("amqp_stream_offset", static_cast<double>(*stream_done_));
  }
  if (!saver_) return;
  saver_->offer(std::to_string(*stream_done_));
  if (now && !saver_->save_now(std::chrono::seconds(2)))
    spdlog::warn(
        "amqp event=stream_position_not_saved source=\"{}\" offset={} "
        "detail=\"the database did not take it in 2 s: the next start reads again "
        "what came after the last position saved\"",
        describe_, *stream_done_);
}

void AmqpSource::refuse_stream_read_as_queue() {
  refused_ = true;
  spdlog::error(
      "amqp event=queue_is_a_stream source=\"{}\" action=\"consuming stopped\" detail=\"the "
      "queue is a stream (its deliveries carry x-stream-offset): set "
      "source.rabbitmq.stream_offset (first, last, next, an offset or a time) to read it "
      "with a saved position\"",
      describe_);
  context_.warning("AMQP source: '" + options_.queue +
                   "' is a stream: set source.rabbitmq.stream_offset; consuming stopped");
  for (const auto channel : pool_.channels()) {
    connection_->close_channel(channel);
    drop_channel(channel, "the queue is a stream", /*expected=*/true);
  }
}

void AmqpSource::track_stream_delivery(std::uint64_t lease, std::uint64_t tag,
                                       const amqp_message_t& message) {
  MutexLock lock(stream_mutex_);
  if (lease != stream_lease_) return;
  const auto offset = amqp::stream_offset_of(message.properties);
  if (offset && stream_expected_) {
    if (*offset > *stream_expected_)
      spdlog::warn(
          "amqp event=stream_offsets_gone source=\"{}\" expected={} first={} detail=\"the "
          "stream no longer holds offsets {} to {} (its retention removed them, or it was "
          "deleted and declared again): they were never read\"",
          describe_, *stream_expected_, *offset, *stream_expected_, *offset - 1);
    stream_expected_.reset();
  }
  // The first delivery pins where the options said to start ("next", "last", a
  // time): a rewind or a recovery before anything is done starts there again, and so
  // does a restart (-1: from offset 0).
  if (offset && !stream_done_) stream_done_ = *offset - 1;
  if (offset) {
    if (stream_seen_ && *offset <= *stream_seen_) {
      ++stream_redeliveries_;  // read again after a rewind or a recovery
      if (++redeliveries_unreported_ >= 100) report_stream_redeliveries();
    }
    stream_seen_ = std::max(stream_seen_.value_or(*offset), *offset);
    last_delivered_offset_ = *offset;
  }
  if (!offset && !warned_no_offset_) {
    warned_no_offset_ = true;
    context_.warning("AMQP source: a delivery from '" + options_.queue +
                     "' has no x-stream-offset header: is the queue a stream "
                     "(source.rabbitmq.stream_offset is set)?");
  }
  // Without its header a delivery counts as where the last one was: the saved
  // position never passes an offset not seen.
  const auto position = last_delivered_offset_ ? *last_delivered_offset_ : stream_done_;
  if (position) stream_tracker_.delivered(tag, static_cast<std::uint64_t>(*position));
}

void AmqpSource::report_stream_redeliveries() {
  redeliveries_unreported_ = 0;
  gauge("amqp_stream_redeliveries", static_cast<double>(stream_redeliveries_));
}

}  // namespace sluice::amqp_source
