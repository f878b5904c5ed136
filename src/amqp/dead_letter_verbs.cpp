#include "amqp/dead_letter_verbs.hpp"

#include <sys/time.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "amqp/connection.hpp"
#include "runtime/token_bucket.hpp"

namespace sluice::amqp {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::uint16_t kGet = 1;      // basic.get from the dead-letter queue, and its acks
constexpr std::uint16_t kPublish = 2;  // the confirm channel of a redrive
constexpr std::uint16_t kLookup = 3;   // passive declares (a missing name closes the channel)
constexpr const char* kReasonHeader = "sluice-reject-reason";
constexpr std::size_t kWindow = 100;  // fetched, published, then confirmed together

// RabbitMQ's own flags, and the ones every source shares (read when the verb runs).
struct Flags {
  std::string url;  // also SLUICE_AMQP_URL
  std::string queue;
  std::string to_exchange, routing_key;
  const driver::DeadLetterRequest* shared = nullptr;
};

struct MessageDeleter {
  void operator()(amqp_message_t* m) const {
    amqp_destroy_message(m);
    delete m;
  }
};

// A message fetched with basic.get, not yet acknowledged (the broker requeues it when
// the channel closes, whatever ends the verb).
struct Letter {
  std::uint64_t tag = 0;
  bool redelivered = false;
  std::string routing_key;  // the one it was dead-lettered with
  std::unique_ptr<amqp_message_t, MessageDeleter> message;
  nlohmann::json headers = nlohmann::json::object();

  std::string body() const { return text(message->body); }
  std::string message_id() const {
    return message->properties._flags & AMQP_BASIC_MESSAGE_ID_FLAG
               ? text(message->properties.message_id)
               : "";
  }
  // The latest death (x-death is newest first), or an empty object.
  nlohmann::json death() const {
    const auto it = headers.find("x-death");
    if (it != headers.end() && it->is_array() && !it->empty() && (*it)[0].is_object())
      return (*it)[0];
    return nlohmann::json::object();
  }
  std::string reason() const {
    const auto it = headers.find(kReasonHeader);
    if (it != headers.end() && it->is_string()) return *it;
    return death().value("reason", "");
  }
  std::string source_queue() const { return death().value("queue", ""); }
  // The routing key it was first published with, before it died.
  std::string original_routing_key() const {
    const auto keys = death().value("routing-keys", nlohmann::json::array());
    if (keys.is_array() && !keys.empty() && keys[0].is_string()) return keys[0];
    return routing_key;
  }
};

nlohmann::json field_json(const amqp_field_value_t& v);

nlohmann::json table_json(const amqp_table_t& table) {
  auto out = nlohmann::json::object();
  for (int i = 0; i < table.num_entries; ++i)
    out[text(table.entries[i].key)] = field_json(table.entries[i].value);
  return out;
}

nlohmann::json field_json(const amqp_field_value_t& v) {
  switch (v.kind) {
    case AMQP_FIELD_KIND_UTF8:
    case AMQP_FIELD_KIND_BYTES:
      return text(v.value.bytes);
    case AMQP_FIELD_KIND_BOOLEAN:
      return static_cast<bool>(v.value.boolean);
    case AMQP_FIELD_KIND_I8:
      return v.value.i8;
    case AMQP_FIELD_KIND_U8:
      return v.value.u8;
    case AMQP_FIELD_KIND_I16:
      return v.value.i16;
    case AMQP_FIELD_KIND_U16:
      return v.value.u16;
    case AMQP_FIELD_KIND_I32:
      return v.value.i32;
    case AMQP_FIELD_KIND_U32:
      return v.value.u32;
    case AMQP_FIELD_KIND_I64:
      return v.value.i64;
    case AMQP_FIELD_KIND_U64:
    case AMQP_FIELD_KIND_TIMESTAMP:
      return v.value.u64;
    case AMQP_FIELD_KIND_F32:
      return v.value.f32;
    case AMQP_FIELD_KIND_F64:
      return v.value.f64;
    case AMQP_FIELD_KIND_DECIMAL:
      return {{"decimals", v.value.decimal.decimals}, {"value", v.value.decimal.value}};
    case AMQP_FIELD_KIND_ARRAY: {
      auto out = nlohmann::json::array();
      for (int i = 0; i < v.value.array.num_entries; ++i)
        out.push_back(field_json(v.value.array.entries[i]));
      return out;
    }
    case AMQP_FIELD_KIND_TABLE:
      return table_json(v.value.table);
    default:
      return nullptr;
  }
}

std::string dump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::unique_ptr<Connection> connect(const Flags& f) {
  ConnectionOptions o;
  o.uri = parse_uri(f.url);
  o.connection_name = "sluice-dlq";
  auto connection = std::make_unique<Connection>(o);
  connection->open_channel(kGet);
  return connection;
}

// The next ready message of the queue, held unacknowledged; nothing when none is ready.
std::optional<Letter> fetch(Connection& c, const std::string& queue) {
  const amqp_rpc_reply_t reply =
      amqp_basic_get(c.raw(), kGet, amqp_cstring_bytes(queue.c_str()), 0);
  c.check_reply(("fetching from the queue '" + queue + "'").c_str());
  if (reply.reply.id != AMQP_BASIC_GET_OK_METHOD) return std::nullopt;
  const auto* ok = static_cast<const amqp_basic_get_ok_t*>(reply.reply.decoded);
  Letter l;
  l.tag = ok->delivery_tag;
  l.redelivered = ok->redelivered != 0;
  l.routing_key = text(ok->routing_key);
  l.message.reset(new amqp_message_t{});
  const auto read = amqp_read_message(c.raw(), kGet, l.message.get(), 0);
  if (read.reply_type != AMQP_RESPONSE_NORMAL)
    throw AmqpError(AmqpError::Kind::connection, 0, "reading a dead letter from '" + queue + "'");
  if (l.message->properties._flags & AMQP_BASIC_HEADERS_FLAG)
    l.headers = table_json(l.message->properties.headers);
  return l;
}

// Up to `max` messages, requeued as they were once they have been looked at.
template <class Visit>
std::size_t look(Connection& c, const std::string& queue, std::size_t max, Visit visit) {
  std::size_t seen = 0;
  while (seen < max) {
    auto letter = fetch(c, queue);
    if (!letter) break;
    visit(*letter);
    ++seen;
  }
  c.close_channel(kGet);  // every one fetched goes back
  return seen;
}

int stats(Connection& c, const Flags& f) {
  const auto info = c.inspect_queue(kGet, f.queue);
  std::cout << "dead letters   " << info.messages << " ready, " << info.consumers
            << " consumers (unacknowledged: sluice queue stats --management-url)\n";
  std::map<std::string, std::size_t> reasons, sources;
  const auto sample = look(c, f.queue, 100, [&](const Letter& l) {
    const auto reason = l.reason();
    ++reasons[reason.empty() ? "(none: not dead-lettered by the broker)" : reason];
    if (const auto from = l.source_queue(); !from.empty()) ++sources[from];
  });
  std::cout << "reasons        (a sample of " << sample << ")\n";
  for (const auto& [reason, n] : reasons) std::cout << "  " << reason << "  " << n << "\n";
  for (const auto& [source, n] : sources) std::cout << "from           " << source << "\n";
  return 0;
}

int peek(Connection& c, const Flags& f) {
  const std::size_t max = f.shared->max == 0 ? 10 : f.shared->max;
  const bool json = f.shared->json;
  const auto shown = look(c, f.queue, max, [&](const Letter& l) {
    const auto death = l.death();
    if (json) {
      nlohmann::json line{{"message_id", l.message_id()},
                          {"reason", l.reason()},
                          {"source_queue", l.source_queue()},
                          {"death_count", death.value("count", 0)},
                          {"dead_lettered_at", death.value("time", 0)},
                          {"routing_key", l.original_routing_key()},
                          {"redelivered", l.redelivered},
                          {"headers", l.headers},
                          {"body", l.body()}};
      std::cout << dump(line) << "\n";
      return;
    }
    const auto reason = l.reason();
    const auto body = l.body();
    std::cout << (l.message_id().empty() ? "-" : l.message_id())
              << "  reason=" << (reason.empty() ? "-" : reason)
              << "  deaths=" << death.value("count", 0) << "  from=" << l.source_queue()
              << "  routing_key=" << l.original_routing_key() << "\n  "
              << (body.size() > 200 ? body.substr(0, 200) + "..." : body) << "\n";
  });
  std::cerr << "sluice dlq peek: " << shown << " shown, none consumed (requeued"
            << (shown ? ", marked redelivered" : "") << ")\n";
  return 0;
}

// The broker's answers to one window of publishes: the confirmed ones (acked and not
// returned) by their index in the window.
std::vector<bool> await_confirms(Connection& c, const std::vector<Letter>& window,
                                 const std::vector<std::string>& keys, std::uint64_t first_seq,
                                 std::set<std::string>& causes) {
  std::map<std::uint64_t, std::size_t> pending;  // publish sequence -> index
  for (std::size_t i = 0; i < window.size(); ++i) pending[first_seq + i] = i;
  std::vector<bool> confirmed(window.size(), false), returned(window.size(), false);
  const auto give_up = Clock::now() + std::chrono::seconds(30);
  while (!pending.empty()) {
    amqp_frame_t frame;
    timeval tv{1, 0};
    const int status = amqp_simple_wait_frame_noblock(c.raw(), &frame, &tv);
    if (status == AMQP_STATUS_TIMEOUT) {
      if (Clock::now() > give_up)
        throw AmqpError(AmqpError::Kind::timeout, 0, "no confirm from the broker in 30 s");
      continue;
    }
    if (status != AMQP_STATUS_OK)
      throw AmqpError(AmqpError::Kind::connection, 0,
                      std::string("waiting for confirms: ") + amqp_error_string2(status));
    if (frame.frame_type != AMQP_FRAME_METHOD) continue;
    const auto& method = frame.payload.method;
    auto settle = [&](std::uint64_t tag, bool multiple, bool ok) {
      for (auto it = pending.begin(); it != pending.end();) {
        if (it->first != tag && !(multiple && it->first < tag)) {
          ++it;
          continue;
        }
        confirmed[it->second] = ok && !returned[it->second];
        if (!ok) causes.insert("nacked by the broker");
        it = pending.erase(it);
      }
    };
    switch (method.id) {
      case AMQP_BASIC_ACK_METHOD: {
        const auto* ack = static_cast<const amqp_basic_ack_t*>(method.decoded);
        settle(ack->delivery_tag, ack->multiple, true);
        break;
      }
      case AMQP_BASIC_NACK_METHOD: {
        const auto* nack = static_cast<const amqp_basic_nack_t*>(method.decoded);
        settle(nack->delivery_tag, nack->multiple, false);
        break;
      }
      case AMQP_BASIC_RETURN_METHOD: {
        // Unroutable: its ack follows. The returned copy names no sequence number, so
        // it is matched by routing key, message id and body to a pending one (two equal
        // messages are interchangeable).
        const auto* ret = static_cast<const amqp_basic_return_t*>(method.decoded);
        const std::string why = std::to_string(ret->reply_code) + " " + text(ret->reply_text);
        const std::string key = text(ret->routing_key);
        amqp_message_t copy;
        if (amqp_read_message(c.raw(), frame.channel, &copy, 0).reply_type != AMQP_RESPONSE_NORMAL)
          throw AmqpError(AmqpError::Kind::connection, 0, "reading a returned message");
        const std::string body = text(copy.body);
        const std::string id = copy.properties._flags & AMQP_BASIC_MESSAGE_ID_FLAG
                                   ? text(copy.properties.message_id)
                                   : "";
        amqp_destroy_message(&copy);
        for (const auto& [seq, i] : pending)
          if (!returned[i] && keys[i] == key && window[i].message_id() == id &&
              window[i].body() == body) {
            returned[i] = true;
            break;
          }
        causes.insert("returned by the broker: " + why + " (routing key '" + key + "')");
        break;
      }
      case AMQP_CHANNEL_CLOSE_METHOD:
      case AMQP_CONNECTION_CLOSE_METHOD:
        throw AmqpError(AmqpError::Kind::connection, 0, describe_close(method));
      default:
        break;
    }
  }
  return confirmed;
}

int redrive(Connection& c, const Flags& f) {
  const auto& r = *f.shared;
  if (r.to.empty() == f.to_exchange.empty()) {
    std::cerr << "sluice dlq redrive: give --to QUEUE or --to-exchange EXCHANGE (RabbitMQ), "
                 "one of them\n";
    return 2;
  }
  if (!f.routing_key.empty() && !r.to.empty()) {
    std::cerr << "sluice dlq redrive: --routing-key goes with --to-exchange (--to QUEUE "
                 "publishes through the default exchange, whose key is the queue's name)\n";
    return 2;
  }
  if (r.to == f.queue) {
    std::cerr << "sluice dlq redrive: --to is the dead-letter queue itself\n";
    return 2;
  }
  // Both ends exist: checked before anything is fetched.
  c.inspect_queue(kGet, f.queue);
  c.open_channel(kLookup);
  try {
    if (!r.to.empty())
      c.inspect_queue(kLookup, r.to);
    else
      c.inspect_exchange(kLookup, f.to_exchange);
  } catch (const AmqpError& e) {
    if (!e.not_found()) throw;
    std::cerr << "sluice dlq redrive: " << (r.to.empty() ? "--to-exchange " : "--to ")
              << (r.to.empty() ? f.to_exchange : r.to) << ": not found on the broker\n";
    return 2;
  }
  c.close_channel(kLookup);
  c.open_channel(kPublish);
  c.confirm_select(kPublish);
  const std::string exchange = r.to.empty() ? f.to_exchange : "";

  std::optional<runtime::TokenBucket> bucket;
  if (r.rate > 0) bucket.emplace(r.rate, std::min(r.rate, 10.0), Clock::now());
  const bool tty = isatty(STDERR_FILENO);
  const auto started = Clock::now();
  auto last_moved_at = started;  // the rate is over the time spent moving
  std::size_t moved = 0, failed = 0, skipped = 0;
  std::set<std::string> causes;
  std::vector<Letter> held;  // picked out or refused: requeued when the channel closes
  std::uint64_t next_seq = 1;
  auto progress = [&](bool last) {
    const double s = std::chrono::duration<double>(last_moved_at - started).count();
    std::cerr << (tty ? "\r" : "") << "sluice dlq redrive: " << moved << " moved, " << failed
              << " failed, " << skipped << " skipped, "
              << static_cast<long>(static_cast<double>(moved) / std::max(s, 1e-3)) << " msg/s"
              << (last || !tty ? "\n" : "") << std::flush;
  };
  auto last_progress = Clock::now();
  bool drained = false;
  try {
    while (!drained && (r.max == 0 || moved + failed < r.max)) {
      std::size_t wanted = kWindow;
      if (r.max > 0) wanted = std::min(wanted, r.max - moved - failed);
      int taken = 0;
      if (bucket) {
        Clock::duration wait{};
        while ((taken = bucket->take(static_cast<int>(wanted), Clock::now(), wait)) == 0)
          std::this_thread::sleep_for(wait);
        wanted = static_cast<std::size_t>(taken);
      }
      std::vector<Letter> window;
      std::vector<std::string> keys;
      while (window.size() < wanted) {
        auto letter = fetch(c, f.queue);
        if (!letter) {
          drained = true;
          break;
        }
        if (!r.filter_reason.empty() && letter->reason() != r.filter_reason) {
          ++skipped;
          held.push_back(std::move(*letter));
          continue;
        }
        keys.push_back(!r.to.empty()            ? r.to
                       : !f.routing_key.empty() ? f.routing_key
                                                : letter->original_routing_key());
        window.push_back(std::move(*letter));
      }
      if (bucket) bucket->returned(taken, static_cast<int>(window.size()));
      if (window.empty()) continue;
      const std::uint64_t first_seq = next_seq;
      for (std::size_t i = 0; i < window.size(); ++i) {
        const auto& m = *window[i].message;
        const int status =
            amqp_basic_publish(c.raw(), kPublish, amqp_cstring_bytes(exchange.c_str()),
                               amqp_cstring_bytes(keys[i].c_str()), 1, 0, &m.properties, m.body);
        if (status != AMQP_STATUS_OK)
          throw AmqpError(AmqpError::Kind::connection, 0,
                          std::string("publishing: ") + amqp_error_string2(status));
        ++next_seq;
      }
      const auto confirmed = await_confirms(c, window, keys, first_seq, causes);
      // Acknowledged in the dead-letter queue only once the destination has it.
      for (std::size_t i = 0; i < window.size(); ++i) {
        if (confirmed[i]) {
          c.ack(kGet, window[i].tag, false);
          ++moved;
          last_moved_at = Clock::now();
        } else {
          ++failed;
          held.push_back(std::move(window[i]));
        }
      }
      amqp_maybe_release_buffers(c.raw());
      if (Clock::now() - last_progress > std::chrono::milliseconds(500)) {
        progress(false);
        last_progress = Clock::now();
      }
    }
  } catch (const AmqpError&) {
    progress(true);
    std::cerr << "sluice dlq redrive: stopped: every message not acknowledged is back in the "
                 "dead-letter queue; one published but not yet acknowledged there may arrive "
                 "twice (a duplicate the hash absorbs): run it again\n";
    throw;
  }
  c.close_channel(kGet);  // what is held goes back, visible at once
  progress(true);
  for (const auto& cause : causes)
    std::cerr << "sluice dlq redrive: left in the dead-letter queue: " << cause << "\n";
  return failed == 0 ? 0 : 1;
}

// Runs a verb on a fresh connection; what went wrong becomes an exit code (2: the
// user's to fix).
int run(const char* verb, const Flags& f, int (*body)(Connection&, const Flags&)) {
  if (f.url.empty()) {
    std::cerr << "sluice dlq " << verb
              << ": --amqp-url: missing (or SLUICE_AMQP_URL), expected "
                 "amqp://user:password@host:port/vhost\n";
    return 2;
  }
  try {
    auto connection = connect(f);
    return body(*connection, f);
  } catch (const std::invalid_argument& e) {
    std::cerr << "sluice dlq " << verb << ": --amqp-url: " << e.what() << "\n";
    return 2;
  } catch (const AmqpError& e) {
    std::cerr << "sluice dlq " << verb << ": " << e.what() << "\n";
    return e.kind() == AmqpError::Kind::auth || e.not_found() ? 2 : 1;
  }
}

}  // namespace

void add_dead_letter_verbs(const driver::VerbCommands& commands, driver::SourceVerbs& verbs) {
  auto f = std::make_shared<Flags>();
  f->shared = commands.dead_letters;
  for (auto* verb : {commands.dlq_stats, commands.dlq_peek, commands.dlq_redrive}) {
    verb->add_option("--queue", f->queue, "RabbitMQ: the dead-letter queue's name");
    verb->add_option("--amqp-url", f->url,
                     "RabbitMQ: amqp://user:password@host:port/vhost (or SLUICE_AMQP_URL)")
        ->envname("SLUICE_AMQP_URL");
  }
  commands.dlq_redrive->add_option(
      "--to-exchange", f->to_exchange,
      "RabbitMQ: publish to this exchange instead of --to QUEUE, with --routing-key or each "
      "message's original routing key (x-death)");
  commands.dlq_redrive->add_option("--routing-key", f->routing_key,
                                   "RabbitMQ, with --to-exchange: the routing key of every one");
  const std::string choose = "--queue with --amqp-url (RabbitMQ)";
  auto chosen = [f] { return !f->queue.empty(); };
  verbs.dlq_stats =
      driver::SourceVerbs::Verb{choose, chosen, false, [f] { return run("stats", *f, stats); }};
  verbs.dlq_peek =
      driver::SourceVerbs::Verb{choose, chosen, false, [f] { return run("peek", *f, peek); }};
  verbs.dlq_redrive =
      driver::SourceVerbs::Verb{choose, chosen, false, [f] { return run("redrive", *f, redrive); }};
}

}  // namespace sluice::amqp
