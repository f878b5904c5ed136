#include "amqp/dead_letter_verbs.hpp"

#include <simdjson.h>
#include <sys/time.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <csignal>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "amqp/connection.hpp"
#include "amqp/message_text.hpp"
#include "common/crypto.hpp"
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
  // A header (or x-death field) as a string or a whole number; anything else (a producer
  // may write any header, x-death included) reads as nothing.
  static std::string string_of(const nlohmann::json& object, const char* key) {
    const auto it = object.find(key);
    return it != object.end() && it->is_string() ? it->get<std::string>() : "";
  }
  static long long number_of(const nlohmann::json& object, const char* key) {
    const auto it = object.find(key);
    return it != object.end() && it->is_number_integer() ? it->get<long long>() : 0;
  }
  std::string reason() const {
    const auto own = string_of(headers, kReasonHeader);
    return own.empty() ? string_of(death(), "reason") : own;
  }
  std::string source_queue() const { return string_of(death(), "queue"); }
  // The routing key it was first published with, before it died; without x-death, the
  // one it came into the dead-letter queue with.
  std::string original_routing_key() const {
    const auto d = death();
    const auto keys = d.find("routing-keys");
    if (keys != d.end() && keys->is_array() && !keys->empty() && (*keys)[0].is_string())
      return (*keys)[0];
    return routing_key;
  }
};

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

// A quorum queue counts every delivery, a requeued look included (x-delivery-count):
// with an x-delivery-limit, enough looks dead-letter or drop a message.
void warn_if_counted(const Letter& l, bool& warned) {
  if (warned || Letter::number_of(l.headers, "x-delivery-count") == 0) return;
  warned = true;
  std::cerr << "sluice dlq: this queue counts deliveries (x-delivery-count, a quorum queue): "
               "each look or requeue adds one, and with an x-delivery-limit the broker drops "
               "or dead-letters a message that reaches it\n";
}

// Up to `max` messages, requeued as they were once they have been looked at.
template <class Visit>
std::size_t look(Connection& c, const std::string& queue, std::size_t max, Visit visit) {
  std::size_t seen = 0;
  bool warned = false;
  while (seen < max) {
    auto letter = fetch(c, queue);
    if (!letter) break;
    warn_if_counted(*letter, warned);
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
    ++reasons[reason.empty() ? "(none: not dead-lettered by the broker)" : printable(reason)];
    if (const auto from = l.source_queue(); !from.empty()) ++sources[printable(from)];
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
    const auto body = l.body();
    if (json) {
      nlohmann::json line{{"message_id", l.message_id()},
                          {"reason", l.reason()},
                          {"source_queue", l.source_queue()},
                          {"death_count", Letter::number_of(death, "count")},
                          {"dead_lettered_at", Letter::number_of(death, "time")},
                          {"routing_key", l.original_routing_key()},
                          {"redelivered", l.redelivered},
                          {"headers", l.headers}};
      if (utf8(body))
        line["body"] = body;
      else
        line["body_base64"] = crypto::base64_encode(body);  // bytes kept exactly
      std::cout << dump(line) << "\n";
      return;
    }
    const auto reason = l.reason();
    std::cout << (l.message_id().empty() ? "-" : printable(l.message_id()))
              << "  reason=" << (reason.empty() ? "-" : printable(reason))
              << "  deaths=" << Letter::number_of(death, "count")
              << "  from=" << printable(l.source_queue())
              << "  routing_key=" << printable(l.original_routing_key()) << "\n  "
              << printable(body.size() > 200 ? body.substr(0, 200) + "..." : body) << "\n";
  });
  std::cerr << "sluice dlq peek: " << shown << " shown, none consumed (requeued"
            << (shown ? ", marked redelivered" : "") << ")\n";
  return 0;
}

// What identifies a published message in the broker's return of it: every property
// (headers included, as encoded on the wire), the routing key and the body. Two
// messages equal in all of these are interchangeable.
std::string fingerprint(const amqp_basic_properties_t& properties, const std::string& routing_key,
                        amqp_bytes_t body) {
  std::string encoded(4096, '\0');
  for (;;) {
    const int size =
        amqp_encode_properties(AMQP_BASIC_CLASS, const_cast<amqp_basic_properties_t*>(&properties),
                               amqp_bytes_t{encoded.size(), encoded.data()});
    if (size >= 0) {
      encoded.resize(static_cast<std::size_t>(size));
      break;
    }
    if (encoded.size() > (64u << 20))
      throw AmqpError(AmqpError::Kind::connection, 0, "properties too large");
    encoded.resize(encoded.size() * 4);
  }
  encoded += '\n' + routing_key + '\n';
  encoded.append(static_cast<const char*>(body.bytes), body.len);
  return crypto::sha256_hex(encoded);
}

// A message of a window: the dead letter, what it is published as, and its identity.
struct Outgoing {
  Letter letter;
  std::string routing_key;
  amqp_basic_properties_t properties{};
  std::vector<amqp_table_entry_t> headers;  // without sluice-reject-reason
};

// The broker's answers to one window of publishes: the confirmed ones (acked and not
// returned) by their index in the window.
std::vector<bool> await_confirms(Connection& c, const std::vector<Outgoing>& window,
                                 std::uint64_t first_seq,
                                 std::map<std::string, std::size_t>& causes) {
  std::map<std::uint64_t, std::size_t> pending;  // publish sequence -> index
  for (std::size_t i = 0; i < window.size(); ++i) pending[first_seq + i] = i;
  std::vector<bool> confirmed(window.size(), false), returned(window.size(), false);
  const auto give_up = Clock::now() + std::chrono::seconds(30);
  while (!pending.empty()) {
    const amqp_frame_t frame = c.wait_method(give_up, "confirm");
    const auto& method = frame.payload.method;
    auto settle = [&](std::uint64_t tag, bool multiple, bool ok) {
      for (auto it = pending.begin(); it != pending.end();) {
        if (it->first != tag && !(multiple && it->first < tag)) {
          ++it;
          continue;
        }
        confirmed[it->second] = ok && !returned[it->second];
        if (!ok) ++causes["nacked by the broker (a full queue that rejects publishes?)"];
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
        // Unroutable: its ack follows. The returned copy names no sequence number: it
        // is matched to a pending message equal to it in every property and byte.
        const auto* ret = static_cast<const amqp_basic_return_t*>(method.decoded);
        const std::string why = std::to_string(ret->reply_code) + " " + text(ret->reply_text);
        const std::string key = text(ret->routing_key);
        amqp_message_t copy;
        if (amqp_read_message(c.raw(), frame.channel, &copy, 0).reply_type != AMQP_RESPONSE_NORMAL)
          throw AmqpError(AmqpError::Kind::connection, 0, "reading a returned message");
        const auto returned_as = fingerprint(copy.properties, key, copy.body);
        amqp_destroy_message(&copy);
        bool matched = false;
        // Computed only here: a return is rare, a digest per message published is not.
        for (const auto& [seq, i] : pending)
          if (!returned[i] && fingerprint(window[i].properties, window[i].routing_key,
                                          window[i].letter.message->body) == returned_as) {
            returned[i] = matched = true;
            break;
          }
        // Not recognized (the broker encoded it otherwise): every message still waiting
        // for its confirm stays in the dead-letter queue, as if returned. Some may be
        // moved twice later; none is lost.
        if (!matched)
          for (const auto& [seq, i] : pending) returned[i] = true;
        ++causes["returned by the broker: " + why + " (routing key '" + printable(key) + "')"];
        break;
      }
      case AMQP_CHANNEL_CLOSE_METHOD:
      case AMQP_CONNECTION_CLOSE_METHOD: {
        const int code =
            method.id == AMQP_CHANNEL_CLOSE_METHOD
                ? static_cast<const amqp_channel_close_t*>(method.decoded)->reply_code
                : static_cast<const amqp_connection_close_t*>(method.decoded)->reply_code;
        throw AmqpError(
            code == 403 || code == 404 ? AmqpError::Kind::channel : AmqpError::Kind::connection,
            code, describe_close(method));
      }
      default:
        break;
    }
  }
  return confirmed;
}

// SIGINT or SIGTERM during a redrive: the window in flight is finished (confirms, acks),
// then it stops with its summary.
std::atomic<bool> stop_requested{false};
extern "C" void request_stop(int) {
  stop_requested.store(true);
}

// Waits `wait` while answering the broker's heartbeats (rabbitmq-c sends and checks
// them only inside its calls): a slow --rate must not lose the connection.
void idle(Connection& c, Clock::duration wait) {
  const auto until = Clock::now() + wait;
  while (!stop_requested.load()) {
    const auto left = until - Clock::now();
    if (left <= Clock::duration::zero()) return;
    const auto slice = std::min<Clock::duration>(left, std::chrono::milliseconds(500));
    timeval tv{0, static_cast<suseconds_t>(
                      std::chrono::duration_cast<std::chrono::microseconds>(slice).count())};
    amqp_frame_t frame;
    const int status = amqp_simple_wait_frame_noblock(c.raw(), &frame, &tv);
    if (status == AMQP_STATUS_TIMEOUT) continue;
    if (status != AMQP_STATUS_OK)
      throw AmqpError(AmqpError::Kind::connection, 0,
                      std::string("waiting out the rate: ") + amqp_error_string2(status) +
                          " (a heartbeat missed?)");
    if (frame.frame_type == AMQP_FRAME_METHOD &&
        (frame.payload.method.id == AMQP_CHANNEL_CLOSE_METHOD ||
         frame.payload.method.id == AMQP_CONNECTION_CLOSE_METHOD))
      throw AmqpError(AmqpError::Kind::connection, 0, describe_close(frame.payload.method));
  }
}

// "12.5" below 10 a second, whole numbers above.
std::string per_second(double rate) {
  char text[32];
  std::snprintf(text, sizeof text, rate < 10 ? "%.1f" : "%.0f", rate);
  return text;
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
  if (!r.to.empty() && r.to == f.queue) {
    std::cerr << "sluice dlq redrive: --to is the dead-letter queue itself\n";
    return 2;
  }
  if (f.to_exchange == "amq.default") {
    std::cerr << "sluice dlq redrive: --to-exchange amq.default: the default exchange cannot be "
                 "named; --to QUEUE publishes through it\n";
    return 2;
  }
  // Both ends exist: checked before anything is fetched. The count now is the most this
  // run moves: a message that comes back (its consumer fails again, a retry queue's TTL)
  // is left for the next run instead of going round.
  const std::size_t budget = c.inspect_queue(kGet, f.queue).messages;
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
  std::size_t fetched = 0, moved = 0, failed = 0, skipped = 0;
  std::map<std::string, std::size_t> causes;
  // Picked out or refused ones stay unacknowledged (nothing of them kept here), so that
  // basic.get moves on; the broker requeues them together when the channel closes.
  std::uint64_t next_seq = 1;
  bool warned = false;
  auto progress = [&](bool last) {
    const double s = std::chrono::duration<double>(last_moved_at - started).count();
    std::cerr << (tty ? "\r" : "") << "sluice dlq redrive: " << moved << " moved, " << failed
              << " failed, " << skipped << " skipped, "
              << per_second(static_cast<double>(moved) / std::max(s, 1e-3)) << " msg/s"
              << (last || !tty ? "\n" : "") << std::flush;
  };
  auto last_progress = Clock::now();
  auto maybe_progress = [&] {
    if (Clock::now() - last_progress < std::chrono::milliseconds(500)) return;
    progress(false);
    last_progress = Clock::now();
  };
  struct sigaction action {};
  action.sa_handler = request_stop;
  action.sa_flags = SA_RESTART;  // a blocked call goes on; the loop looks between calls
  sigemptyset(&action.sa_mask);
  struct sigaction old_int {};
  struct sigaction old_term {};
  sigaction(SIGINT, &action, &old_int);
  sigaction(SIGTERM, &action, &old_term);
  struct Restore {
    struct sigaction &old_int, &old_term;
    ~Restore() {
      sigaction(SIGINT, &old_int, nullptr);
      sigaction(SIGTERM, &old_term, nullptr);
    }
  } restore{old_int, old_term};
  bool drained = false;
  try {
    while (!drained && !stop_requested.load() && fetched < budget &&
           (r.max == 0 || moved < r.max)) {
      std::size_t wanted = std::min(kWindow, budget - fetched);
      if (r.max > 0) wanted = std::min(wanted, r.max - moved);
      int taken = 0;
      if (bucket) {
        Clock::duration wait{};
        while ((taken = bucket->take(static_cast<int>(wanted), Clock::now(), wait)) == 0 &&
               !stop_requested.load())
          idle(c, wait);
        if (taken == 0) break;
        wanted = static_cast<std::size_t>(taken);
      }
      std::vector<Outgoing> window;
      while (window.size() < wanted && fetched < budget && !stop_requested.load()) {
        auto letter = fetch(c, f.queue);
        if (!letter) {
          drained = true;
          break;
        }
        ++fetched;
        warn_if_counted(*letter, warned);
        if (!r.filter_reason.empty() && letter->reason() != r.filter_reason) {
          ++skipped;
          maybe_progress();
          continue;
        }
        Outgoing o;
        o.routing_key = !r.to.empty()            ? r.to
                        : !f.routing_key.empty() ? f.routing_key
                                                 : letter->original_routing_key();
        o.letter = std::move(*letter);
        // As it came, but for a reason of an earlier death: if it dies again, the
        // broker's x-death tells why.
        o.properties = o.letter.message->properties;
        if (o.properties._flags & AMQP_BASIC_HEADERS_FLAG) {
          const auto& all = o.properties.headers;
          for (int i = 0; i < all.num_entries; ++i)
            if (text(all.entries[i].key) != kReasonHeader) o.headers.push_back(all.entries[i]);
        }
        window.push_back(std::move(o));
      }
      if (bucket) bucket->returned(taken, static_cast<int>(window.size()));
      if (window.empty()) continue;
      const std::uint64_t first_seq = next_seq;
      for (auto& o : window) {
        if (o.properties._flags & AMQP_BASIC_HEADERS_FLAG)  // o is where it stays now
          o.properties.headers = {static_cast<int>(o.headers.size()), o.headers.data()};
        const int status = amqp_basic_publish(
            c.raw(), kPublish, amqp_cstring_bytes(exchange.c_str()),
            amqp_cstring_bytes(o.routing_key.c_str()), 1, 0, &o.properties, o.letter.message->body);
        if (status != AMQP_STATUS_OK)
          throw AmqpError(AmqpError::Kind::connection, 0,
                          std::string("publishing: ") + amqp_error_string2(status));
        ++next_seq;
      }
      const auto confirmed = await_confirms(c, window, first_seq, causes);
      // Acknowledged in the dead-letter queue only once the destination has it.
      for (std::size_t i = 0; i < window.size(); ++i) {
        if (confirmed[i]) {
          c.ack(kGet, window[i].letter.tag, false);
          ++moved;
          last_moved_at = Clock::now();
        } else {
          ++failed;
        }
      }
      amqp_maybe_release_buffers(c.raw());
      maybe_progress();
    }
  } catch (const AmqpError&) {
    progress(true);
    std::cerr << "sluice dlq redrive: stopped: every message not acknowledged is back in the "
                 "dead-letter queue; those of the window in flight (up to "
              << kWindow
              << ") may have reached the destination too and arrive twice (a pipeline with a "
                 "content identity stores them once): run it again\n";
    throw;
  }
  c.close_channel(kGet);  // what is held goes back, visible at once
  progress(true);
  std::size_t shown = 0;
  for (const auto& [cause, n] : causes)
    if (shown++ < 5)
      std::cerr << "sluice dlq redrive: left in the dead-letter queue: " << n << " " << cause
                << "\n";
  if (causes.size() > 5)
    std::cerr << "sluice dlq redrive: ... and " << causes.size() - 5 << " other causes\n";
  if (stop_requested.load()) {
    std::cerr << "sluice dlq redrive: stopped by a signal after the window in flight; run it "
                 "again for the rest\n";
    return 1;
  }
  if (fetched >= budget && budget > 0 && !drained && (r.max == 0 || moved < r.max))
    std::cerr << "sluice dlq redrive: ended after the " << budget
              << " dead letters there were at the start (any that arrived since are left for "
                 "another run)\n";
  if (!r.filter_reason.empty() && moved == 0 && skipped > 0)
    std::cerr << "sluice dlq redrive: no dead letter had the reason '" << r.filter_reason
              << "' (sluice dlq stats shows the reasons)\n";
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
    // A refused login, a missing queue or exchange, a refused permission: the user's to fix.
    return e.kind() == AmqpError::Kind::auth || e.not_found() || e.reply_code() == 403 ? 2 : 1;
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
