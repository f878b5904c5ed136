#include "ingest/record_stage.hpp"

#include <spdlog/spdlog.h>

#include "ingest/message_properties.hpp"

namespace sluice::ingest {
namespace {

// "skuId=SKU-1 locationId=LOC-7": the configured business fields, for log lines.
std::string log_context(const pipeline::Record& record, const std::vector<std::string>& fields) {
  std::string out;
  for (const auto& f : fields) {
    const auto* value = pipeline::find_field(record.document, f);
    if (!value) continue;
    out += (out.empty() ? "" : " ") + f + "=" +
           (value->is_string() ? value->get<std::string>() : value->dump());
  }
  return out;
}

// normalize.fields[].attribute and .header read Message::header.
std::optional<std::string_view> message_header(const void* message, std::string_view name) {
  return static_cast<const Message*>(message)->header(name);
}

// A rejected message is acked once its row is kept: its span says it was rejected.
void mark_rejected(Message& message, const std::string& reason, const std::string& detail) {
  message.set_trace_attribute("sluice.record", "rejected");
  message.set_trace_attribute("sluice.reject.reason", reason);
  message.set_trace_error(reason, detail);
}

}  // namespace

RecordStage::RecordStage(std::string pipeline, const pipeline::TransformSpec& transform,
                         const driver::SourceDriver& source, std::vector<std::string> log_fields,
                         StageEvents events)
    : pipeline_(std::move(pipeline)),
      transformer_(transform),
      source_(source),
      log_fields_(std::move(log_fields)),
      events_(std::move(events)) {}

std::vector<sinks::BatchWriter::Item> RecordStage::handle(std::span<Message> batch) const {
  std::vector<sinks::BatchWriter::Item> items;
  items.reserve(batch.size());
  for (auto& message : batch)
    if (auto item = handle(message)) items.push_back(std::move(*item));
  return items;
}

std::optional<sinks::BatchWriter::Item> RecordStage::handle(Message& message) const {
  const auto meta = source_.read_meta(message);
  if (meta.sent_time && events_.message_age)
    events_.message_age(*meta.sent_time, message.received_at());
  pipeline::MessageView view;
  view.body = message.body();
  view.message_id = message.id();
  view.receive_count = message.receive_count();
  view.sent_time = meta.sent_time;
  view.received_time = message.received_at();
  view.source = message.source();
  view.group_id = meta.group_id;
  view.sequence_number = meta.sequence_number;
  view.deduplication_id = meta.deduplication_id;
  std::string trace_id;
  if (const auto* trace = message.trace_context()) {
    trace_id = trace->trace_id_hex();
    view.trace_id = trace_id;
  }
  view.header = &message_header;
  view.header_context = &message;
  auto result = transformer_.transform(view);
  if (std::holds_alternative<pipeline::Filtered>(result)) {
    if (events_.filtered) events_.filtered();
    spdlog::debug("event=filtered pipeline={} message_id={}{}", pipeline_, message.id(),
                  sinks::trace_field(message));
    message.ack();
    return std::nullopt;
  }
  if (auto* record = std::get_if<pipeline::Record>(&result)) {
    if (!log_fields_.empty()) {
      record->log_context = log_context(*record, log_fields_);
      spdlog::debug("event=normalized message_id={}{} {} hash={}", message.id(),
                    sinks::trace_field(message), record->log_context, record->hash);
    }
    return sinks::BatchWriter::Item{std::move(*record), message};
  }
  const auto& rejection = std::get<pipeline::Rejection>(result);
  const std::string reason = pipeline::to_string(rejection.reason);
  spdlog::warn(
      "event=rejected pipeline={} reason={} message_id={}{} receive_count={} detail=\"{}\"",
      pipeline_, reason, message.id(), sinks::trace_field(message), message.receive_count(),
      rejection.detail);
  return unusable(message, reason, rejection.detail);
}

sinks::BatchWriter::Item RecordStage::unusable(Message& message, const std::string& reason,
                                               const std::string& detail) const {
  if (events_.rejected) events_.rejected(reason);
  mark_rejected(message, reason, detail);
  return {sinks::RejectRow{std::string(message.id()), reason, detail, message.body(),
                           message.source(), properties(message), pipeline_},
          message};
}

std::string RecordStage::properties(const Message& message) const {
  return message_properties(message, source_.read_meta(message));
}

}  // namespace sluice::ingest
