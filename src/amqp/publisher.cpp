#include "sluice/amqp/publisher.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>
#include <unordered_map>

#include "amqp/connection.hpp"
#include "common/crypto.hpp"
#include "sluice/tracing.hpp"

namespace sluice::amqp {
namespace {

constexpr std::uint16_t kChannel = 1;
using Clock = std::chrono::steady_clock;

amqp_bytes_t view(const std::string& s) {
  return {s.size(), const_cast<char*>(s.data())};
}

}  // namespace

Publisher::Publisher(PublisherOptions options) : options_(std::move(options)) {
  if (options_.window < 1)
    throw std::invalid_argument("PublisherOptions::window: got " + std::to_string(options_.window) +
                                ", expected at least 1");
  std::random_device rd;
  const std::uint64_t r = (static_cast<std::uint64_t>(rd()) << 32) | rd();
  id_prefix_ = "sluice-" + crypto::hex(reinterpret_cast<const std::uint8_t*>(&r), 8) + "-";
  connect();
}

Publisher::~Publisher() = default;

void Publisher::on_blocked(const std::string& reason, PublishReport& report) {
  if (blocked_) return;
  blocked_ = true;
  blocked_since_ = Clock::now();
  ++report.blocked;
  spdlog::warn(
      "event=amqp_connection_blocked reason=\"{}\" detail=\"the broker stopped taking "
      "publishes (a memory or disk alarm): publishing paused until it unblocks\"",
      reason);
}

void Publisher::on_unblocked(PublishReport& report) {
  if (!blocked_) return;
  blocked_ = false;
  const auto paused =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - blocked_since_);
  report.blocked_for += paused;
  spdlog::info("event=amqp_connection_unblocked paused_ms={}", paused.count());
}

void Publisher::wait_while_blocked(PublishReport& report) {
  while (blocked_) {
    const amqp_frame_t frame =
        connection_->wait_method(Clock::time_point::max(), "connection.unblocked");
    if (frame.payload.method.id == AMQP_CONNECTION_UNBLOCKED_METHOD) on_unblocked(report);
    if (frame.payload.method.id == AMQP_CONNECTION_CLOSE_METHOD)
      throw AmqpError(
          AmqpError::Kind::connection,
          static_cast<amqp_connection_close_t*>(frame.payload.method.decoded)->reply_code,
          describe_close(frame.payload.method));
  }
}

void Publisher::send(const std::string& exchange, OutgoingMessage message) {
  if (!sent_.empty() && exchange != sent_exchange_) flush_sent();
  sent_exchange_ = exchange;
  sent_bytes_ += message.body.size();
  sent_.push_back(std::move(message));
  if (sent_.size() >= static_cast<std::size_t>(options_.window) ||
      sent_bytes_ >= options_.max_unconfirmed_bytes)
    flush_sent();
}

PublishReport Publisher::wait_for_confirms() {
  flush_sent();
  PublishReport report = std::move(sent_report_);
  sent_report_ = {};
  return report;
}

void Publisher::flush_sent() {
  if (sent_.empty()) return;
  // In place: if publishing throws, what was sent stays queued for the next wait.
  const PublishReport r = publish_in_place(sent_exchange_, sent_, {});
  sent_.clear();
  sent_bytes_ = 0;
  auto& total = sent_report_;
  total.confirmed += r.confirmed;
  total.returned += r.returned;
  total.nacked += r.nacked;
  total.failed += r.failed;
  total.republished += r.republished;
  total.blocked += r.blocked;
  total.blocked_for += r.blocked_for;
  total.total += r.total;
  for (const auto& e : r.errors)
    if (std::find(total.errors.begin(), total.errors.end(), e) == total.errors.end())
      total.errors.push_back(e);
  for (const auto& [why, n] : r.returned_by_reason) total.returned_by_reason[why] += n;
}

void Publisher::connect() {
  connection_.reset();
  blocked_ = false;  // a new connection starts unblocked (the time blocked was counted)
  ConnectionOptions o;
  o.uri = parse_uri(options_.uri);
  o.connection_name = options_.connection_name;
  o.ca_file = options_.ca_file;
  o.verify_hostname = options_.verify_hostname;
  auto connection = std::make_unique<Connection>(o);
  connection->open_channel(kChannel);
  connection->confirm_select(kChannel);
  connection_ = std::move(connection);
  next_seq_ = 1;  // confirm sequence numbers are per channel
}

PublishReport Publisher::publish(const std::string& exchange, std::vector<OutgoingMessage> messages,
                                 const std::function<void(std::size_t)>& progress) {
  return publish_in_place(exchange, messages, progress);
}

PublishReport Publisher::publish_in_place(const std::string& exchange,
                                          std::vector<OutgoingMessage>& messages,
                                          const std::function<void(std::size_t)>& progress) {
  PublishReport report;
  report.total = messages.size();
  std::set<std::string> causes;
  const auto* trace = tracing::current();  // a handler's message, passed on in the headers
  for (auto& m : messages) {
    if (m.message_id.empty()) m.message_id = id_prefix_ + std::to_string(++id_counter_);
    if (trace && trace->valid() && !m.headers.count(std::string(tracing::kTraceparent))) {
      m.headers[std::string(tracing::kTraceparent)] = tracing::format_traceparent(*trace);
      if (!trace->trace_state.empty())
        m.headers[std::string(tracing::kTracestate)] = trace->trace_state;
    }
  }
  std::vector<int> attempts(messages.size(), 0);
  std::vector<std::size_t> todo(messages.size());
  for (std::size_t i = 0; i < todo.size(); ++i) todo[i] = i;
  std::size_t settled = 0;
  std::chrono::milliseconds delay = options_.base_delay;
  // Settled in this attempt: confirmed, returned, or nacked (and so already in `again`).
  std::vector<char> settled_now(messages.size(), 0);

  while (!todo.empty()) {
    std::vector<std::size_t> again;
    for (auto i : todo) settled_now[i] = 0;
    for (std::size_t start = 0, end = 0; start < todo.size(); start = end) {
      // A window: up to `window` messages and `max_unconfirmed_bytes` (at least one).
      std::size_t bytes = 0;
      for (end = start;
           end < todo.size() && end - start < static_cast<std::size_t>(options_.window); ++end) {
        const std::size_t size = messages[todo[end]].body.size();
        if (end > start && bytes + size > options_.max_unconfirmed_bytes) break;
        bytes += size;
      }
      std::unordered_map<std::uint64_t, std::size_t> by_seq;
      std::unordered_map<std::string, std::size_t> by_id;
      std::set<std::size_t> returned;
      std::string failure;
      std::size_t published_end = start;  // todo[start, published_end) were attempted
      try {
        if (!connection_) connect();
        wait_while_blocked(report);  // a broker that is not reading takes nothing
        for (std::size_t k = start; k < end; ++k) {
          const std::size_t i = todo[k];
          const auto& m = messages[i];
          ++attempts[i];
          published_end = k + 1;
          amqp_basic_properties_t p{};
          p._flags = AMQP_BASIC_MESSAGE_ID_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG;
          p.message_id = view(m.message_id);
          p.delivery_mode = m.persistent ? 2 : 1;
          if (!m.content_type.empty()) {
            p._flags |= AMQP_BASIC_CONTENT_TYPE_FLAG;
            p.content_type = view(m.content_type);
          }
          std::vector<amqp_table_entry_t> headers;
          for (const auto& [k2, v] : m.headers) {
            amqp_table_entry_t e{};
            e.key = view(k2);
            e.value.kind = AMQP_FIELD_KIND_UTF8;
            e.value.value.bytes = view(v);
            headers.push_back(e);
          }
          if (!headers.empty()) {
            p._flags |= AMQP_BASIC_HEADERS_FLAG;
            p.headers = {static_cast<int>(headers.size()), headers.data()};
          }
          const int status =
              amqp_basic_publish(connection_->raw(), kChannel, view(exchange), view(m.routing_key),
                                 options_.mandatory ? 1 : 0, 0, &p, view(m.body));
          if (status != AMQP_STATUS_OK)
            throw AmqpError(AmqpError::Kind::connection, 0,
                            std::string("publishing: ") + amqp_error_string2(status));
          by_seq[next_seq_++] = i;
          by_id[m.message_id] = i;
        }
        // The confirms of this window (acks, nacks, returns before their ack).
        auto give_up = Clock::now() + options_.confirm_timeout;
        while (!by_seq.empty()) {
          // No confirm is timed while blocked: its clock starts again at the unblock.
          const amqp_frame_t frame =
              blocked_ ? connection_->wait_method(Clock::time_point::max(), "connection.unblocked")
                       : connection_->wait_method(give_up, "confirm");
          const auto& method = frame.payload.method;
          auto settle = [&](std::uint64_t tag, bool multiple, bool ok) {
            for (auto it = by_seq.begin(); it != by_seq.end();) {
              if (it->first == tag || (multiple && it->first < tag)) {
                const std::size_t i = it->second;
                settled_now[i] = 1;
                if (returned.count(i)) {
                  ++report.returned;
                } else if (ok) {
                  ++report.confirmed;
                } else {
                  again.push_back(i);
                  ++report.nacked;
                  failure = "nacked by the broker";
                }
                it = by_seq.erase(it);
              } else {
                ++it;
              }
            }
          };
          switch (method.id) {
            case AMQP_BASIC_ACK_METHOD: {
              auto* ack = static_cast<amqp_basic_ack_t*>(method.decoded);
              settle(ack->delivery_tag, ack->multiple, true);
              break;
            }
            case AMQP_BASIC_NACK_METHOD: {
              auto* nack = static_cast<amqp_basic_nack_t*>(method.decoded);
              settle(nack->delivery_tag, nack->multiple, false);
              break;
            }
            case AMQP_BASIC_RETURN_METHOD: {
              auto* ret = static_cast<amqp_basic_return_t*>(method.decoded);
              const std::string why = std::to_string(ret->reply_code) + " " + text(ret->reply_text);
              ++report.returned_by_reason[why];
              const std::string key = text(ret->routing_key);
              amqp_message_t message;
              const auto reply = amqp_read_message(connection_->raw(), frame.channel, &message, 0);
              if (reply.reply_type != AMQP_RESPONSE_NORMAL)
                throw AmqpError(AmqpError::Kind::connection, 0, "reading a returned message");
              if (message.properties._flags & AMQP_BASIC_MESSAGE_ID_FLAG) {
                auto it = by_id.find(text(message.properties.message_id));
                if (it != by_id.end()) returned.insert(it->second);
              }
              amqp_destroy_message(&message);
              causes.insert("returned by the broker (" + why + ", exchange '" + exchange +
                            "', routing key '" + key + "')");
              break;
            }
            case AMQP_CONNECTION_BLOCKED_METHOD:
              on_blocked(text(static_cast<amqp_connection_blocked_t*>(method.decoded)->reason),
                         report);
              break;
            case AMQP_CONNECTION_UNBLOCKED_METHOD:
              on_unblocked(report);
              give_up = Clock::now() + options_.confirm_timeout;
              break;
            case AMQP_CHANNEL_CLOSE_METHOD:
            case AMQP_CONNECTION_CLOSE_METHOD: {
              const std::string why = describe_close(method);
              const int code =
                  method.id == AMQP_CHANNEL_CLOSE_METHOD
                      ? static_cast<amqp_channel_close_t*>(method.decoded)->reply_code
                      : static_cast<amqp_connection_close_t*>(method.decoded)->reply_code;
              if (method.id == AMQP_CHANNEL_CLOSE_METHOD) {
                amqp_channel_close_ok_t ok{};
                connection_->send_method(kChannel, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok);
              }
              // A missing exchange (404) will not appear by publishing again.
              throw AmqpError(code == 404 ? AmqpError::Kind::channel : AmqpError::Kind::connection,
                              code, why);
            }
            default:
              break;
          }
        }
        amqp_maybe_release_buffers(connection_->raw());
      } catch (const AmqpError& e) {
        // Everything not settled, in this window and the ones not reached, goes again
        // after a backoff (a connection that cannot be made now is not tried per window).
        // A connection that could not be made counts as an attempt for every message
        // it kept from the broker: a broker that stays away ends in failures, not a loop.
        for (std::size_t k = start; k < todo.size(); ++k)
          if (!settled_now[todo[k]]) {
            if (k >= published_end) ++attempts[todo[k]];
            settled_now[todo[k]] = 1;
            again.push_back(todo[k]);
          }
        failure = e.what();
        on_unblocked(report);  // the time blocked ends with the connection
        connection_.reset();
        causes.insert(failure);
        if (e.reply_code() == 404 || e.reply_code() == 403 || e.kind() == AmqpError::Kind::auth ||
            e.kind() == AmqpError::Kind::tls) {
          report.failed += again.size();  // will not succeed by publishing again
          report.errors.assign(causes.begin(), causes.end());
          return report;
        }
        spdlog::warn("event=amqp_publish_failed error=\"{}\" action=retry unsettled={}", failure,
                     again.size());
        break;
      }
      if (!failure.empty()) causes.insert(failure);  // nacks
      settled = report.confirmed + report.returned;
      if (progress) progress(settled);
    }
    // What failed goes again, after a backoff, while it has attempts left.
    todo.clear();
    for (auto i : again) {
      if (attempts[i] >= options_.max_attempts)
        ++report.failed;
      else
        todo.push_back(i);
    }
    report.republished += todo.size();
    if (!todo.empty()) {
      std::this_thread::sleep_for(delay);
      delay = std::min(delay * 2, options_.max_delay);
    }
  }
  report.errors.assign(causes.begin(), causes.end());
  return report;
}

}  // namespace sluice::amqp
