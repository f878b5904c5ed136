#include "ingest/message_properties.hpp"

#include <chrono>
#include <nlohmann/json.hpp>

namespace sluice::ingest {
namespace {

using Json = nlohmann::json;
using std::chrono::system_clock;

std::int64_t epoch_ms(system_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

std::optional<std::string_view> stored_header(const void* context, std::string_view name) {
  const auto& headers = static_cast<const ReplayedMessage*>(context)->headers;
  const auto it = headers.find(name);
  if (it == headers.end()) return std::nullopt;
  return std::string_view(it->second);
}

}  // namespace

bool replayed_message(const sinks::StoredReject& r, ReplayedMessage& m) {
  m.view.body = r.row.body;
  m.view.message_id = r.row.message_id;
  m.view.source = r.row.source;
  m.view.received_time = system_clock::now();
  m.view.receive_count = 1;
  if (r.row.properties.empty()) return false;
  const auto p = Json::parse(r.row.properties, nullptr, false);
  if (!p.is_object()) return false;
  auto text = [&](const char* key, std::string& into) -> std::optional<std::string_view> {
    if (!p.contains(key) || !p[key].is_string()) return std::nullopt;
    into = p[key].get<std::string>();
    return std::string_view(into);
  };
  if (p.contains("receive_count") && p["receive_count"].is_number_integer())
    m.view.receive_count = p["receive_count"].get<int>();
  if (p.contains("sent_time_ms") && p["sent_time_ms"].is_number_integer())
    m.view.sent_time =
        system_clock::time_point(std::chrono::milliseconds(p["sent_time_ms"].get<std::int64_t>()));
  if (p.contains("received_time_ms") && p["received_time_ms"].is_number_integer())
    m.view.received_time = system_clock::time_point(
        std::chrono::milliseconds(p["received_time_ms"].get<std::int64_t>()));
  m.view.group_id = text("group_id", m.group_id);
  m.view.sequence_number = text("sequence_number", m.sequence_number);
  m.view.deduplication_id = text("deduplication_id", m.deduplication_id);
  if (p.contains("headers") && p["headers"].is_object())
    for (const auto& [name, value] : p["headers"].items())
      if (value.is_string()) m.headers.emplace(name, value.get<std::string>());
  m.view.header = &stored_header;
  m.view.header_context = &m;
  return true;
}

std::string message_properties(const Message& message, const driver::MessageMeta& meta) {
  Json p = Json::object();
  p["receive_count"] = message.receive_count();
  if (meta.sent_time) p["sent_time_ms"] = epoch_ms(*meta.sent_time);
  p["received_time_ms"] = epoch_ms(message.received_at());
  if (meta.group_id) p["group_id"] = std::string(*meta.group_id);
  if (meta.sequence_number) p["sequence_number"] = std::string(*meta.sequence_number);
  if (meta.deduplication_id) p["deduplication_id"] = std::string(*meta.deduplication_id);
  if (!message.headers().empty()) p["headers"] = message.headers();
  // A header may hold any bytes (AMQP): replaced, never thrown on.
  return p.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace sluice::ingest
