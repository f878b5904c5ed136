#include "amqp/connection.hpp"

#include <amqp_ssl_socket.h>
#include <amqp_tcp_socket.h>
#include <openssl/ssl.h>

#include <cctype>
#include <charconv>
#include <cstring>

#include "common/redact.hpp"

namespace sluice::amqp {
namespace {

// Percent-decoding of one URI part; `part` names it in errors (never its value, which
// may be the password).
std::string decode(std::string_view text, const char* part) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out += text[i];
      continue;
    }
    if (i + 2 >= text.size() || !std::isxdigit(static_cast<unsigned char>(text[i + 1])) ||
        !std::isxdigit(static_cast<unsigned char>(text[i + 2])))
      throw std::invalid_argument(std::string("the ") + part +
                                  " has a '%' not followed by two hex digits");
    out += static_cast<char>(std::stoi(std::string(text.substr(i + 1, 2)), nullptr, 16));
    i += 2;
  }
  return out;
}

}  // namespace

std::string text(amqp_bytes_t b) {
  return b.len == 0 ? std::string() : std::string(static_cast<const char*>(b.bytes), b.len);
}

Uri parse_uri(const std::string& text) {
  Uri uri;
  uri.redacted = common::redact_password(text);
  const auto expected = [&](const std::string& what) {
    return std::invalid_argument("got '" + uri.redacted + "': " + what +
                                 " (expected amqp://user:password@host:port/vhost or amqps://...)");
  };
  std::string_view rest(text);
  if (rest.starts_with("amqp://")) {
    rest.remove_prefix(7);
  } else if (rest.starts_with("amqps://")) {
    rest.remove_prefix(8);
    uri.tls = true;
    uri.port = 5671;
  } else {
    throw expected("the scheme must be amqp or amqps");
  }
  if (const auto q = rest.find('?'); q != std::string_view::npos)
    throw expected("query parameters are not read (use the source.amqp options instead)");
  // The authority runs to the first '/' after the last '@' (a password may hold '/').
  const auto at = rest.rfind('@');
  const auto slash = rest.find('/', at == std::string_view::npos ? 0 : at);
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? std::string_view() : rest.substr(slash);
  if (at != std::string_view::npos && at < authority.size()) {
    const std::string_view userinfo = authority.substr(0, at);
    authority.remove_prefix(at + 1);
    const auto colon = userinfo.find(':');
    uri.user = decode(userinfo.substr(0, colon), "user name");
    uri.password =
        colon == std::string_view::npos ? "" : decode(userinfo.substr(colon + 1), "password");
  }
  std::string_view port;
  if (authority.starts_with('[')) {  // [IPv6]
    const auto close = authority.find(']');
    if (close == std::string_view::npos) throw expected("an IPv6 host needs its closing ']'");
    uri.host = std::string(authority.substr(1, close - 1));
    authority.remove_prefix(close + 1);
    if (!authority.empty()) {
      if (authority[0] != ':') throw expected("after ']' only ':port' may follow");
      port = authority.substr(1);
    }
  } else {
    const auto colon = authority.find(':');
    if (colon != std::string_view::npos) {
      port = authority.substr(colon + 1);
      authority = authority.substr(0, colon);
    }
    if (!authority.empty()) uri.host = decode(authority, "host");
  }
  if (uri.host.empty()) throw expected("the host is empty");
  if (!port.empty()) {
    long value = 0;
    for (char c : port) {
      if (!std::isdigit(static_cast<unsigned char>(c)) || (value = value * 10 + (c - '0')) > 65535)
        throw expected("the port must be a number from 1 to 65535");
    }
    if (value < 1) throw expected("the port must be a number from 1 to 65535");
    uri.port = static_cast<int>(value);
  }
  if (!path.empty()) {
    path.remove_prefix(1);
    if (path.find('/') != std::string_view::npos)
      throw expected("a '/' in the vhost must be written %2f");
    // "amqp://host/" names the vhost "" (RabbitMQ's spec); we read it as the default,
    // as most clients do, since no broker has an empty vhost.
    if (!path.empty()) uri.vhost = decode(path, "vhost");
  }
  return uri;
}

std::optional<std::chrono::milliseconds> consumer_timeout_of(int reply_code,
                                                             std::string_view reply_text) {
  if (reply_code != 406 || reply_text.find("delivery acknowledgement") == std::string_view::npos ||
      reply_text.find("timed out") == std::string_view::npos)
    return std::nullopt;
  constexpr std::string_view kValue = "Timeout value used: ";
  const auto at = reply_text.find(kValue);
  if (at == std::string_view::npos) return std::chrono::milliseconds(0);
  const char* first = reply_text.data() + at + kValue.size();
  std::int64_t ms = 0;
  const auto [end, error] = std::from_chars(first, reply_text.data() + reply_text.size(), ms);
  if (error != std::errc() || ms < 0) return std::chrono::milliseconds(0);
  return std::chrono::milliseconds(ms);
}

std::string describe_close(const amqp_method_t& method) {
  if (method.id == AMQP_CONNECTION_CLOSE_METHOD) {
    const auto* close = static_cast<const amqp_connection_close_t*>(method.decoded);
    return "the broker closed the connection: " + std::to_string(close->reply_code) + " " +
           text(close->reply_text);
  }
  if (method.id == AMQP_CHANNEL_CLOSE_METHOD) {
    const auto* close = static_cast<const amqp_channel_close_t*>(method.decoded);
    return "the broker closed the channel: " + std::to_string(close->reply_code) + " " +
           text(close->reply_text);
  }
  return "unexpected method " + std::to_string(method.id);
}

Connection::Connection(const ConnectionOptions& options) {
  const Uri& uri = options.uri;
  describe_ = std::string(uri.tls ? "amqps://" : "amqp://") + uri.host + ":" +
              std::to_string(uri.port) + "/" + (uri.vhost == "/" ? "%2f" : uri.vhost);
  state_ = amqp_new_connection();
  if (!state_) throw AmqpError(AmqpError::Kind::connection, 0, "out of memory");
  amqp_socket_t* socket = nullptr;
  if (uri.tls) {
    socket = amqp_ssl_socket_new(state_);
    if (!socket) fail_socket("creating the TLS socket", AMQP_STATUS_SSL_ERROR);
    auto* context = static_cast<SSL_CTX*>(amqp_ssl_socket_get_context(socket));
    if (!options.ca_file.empty()) {
      if (amqp_ssl_socket_set_cacert(socket, options.ca_file.c_str()) != AMQP_STATUS_OK) {
        amqp_destroy_connection(state_);
        state_ = nullptr;
        throw AmqpError(AmqpError::Kind::tls, 0, "cannot read the CA file " + options.ca_file);
      }
    } else if (context) {
      SSL_CTX_set_default_verify_paths(context);
    }
    amqp_ssl_socket_set_verify_peer(socket, options.verify_peer ? 1 : 0);
    amqp_ssl_socket_set_verify_hostname(socket, options.verify_hostname ? 1 : 0);
  } else {
    socket = amqp_tcp_socket_new(state_);
    if (!socket) fail_socket("creating the socket", AMQP_STATUS_NO_MEMORY);
  }
  timeval connect_timeout{static_cast<time_t>(options.connect_timeout.count() / 1000),
                          static_cast<suseconds_t>(options.connect_timeout.count() % 1000 * 1000)};
  if (const int status =
          amqp_socket_open_noblock(socket, uri.host.c_str(), uri.port, &connect_timeout);
      status != AMQP_STATUS_OK)
    fail_socket("connecting", status);
  amqp_set_handshake_timeout(state_, &connect_timeout);
  timeval rpc{static_cast<time_t>(options.rpc_timeout.count() / 1000),
              static_cast<suseconds_t>(options.rpc_timeout.count() % 1000 * 1000)};
  amqp_set_rpc_timeout(state_, &rpc);

  // rabbitmq-c 0.11 advertises only authentication_failure_close: ask for the
  // notifications we handle (merged with its own table by the library).
  amqp_table_entry_t capabilities[] = {
      {amqp_cstring_bytes("consumer_cancel_notify"), {AMQP_FIELD_KIND_BOOLEAN, {.boolean = 1}}},
      {amqp_cstring_bytes("connection.blocked"), {AMQP_FIELD_KIND_BOOLEAN, {.boolean = 1}}},
      {amqp_cstring_bytes("authentication_failure_close"),
       {AMQP_FIELD_KIND_BOOLEAN, {.boolean = 1}}},
      {amqp_cstring_bytes("publisher_confirms"), {AMQP_FIELD_KIND_BOOLEAN, {.boolean = 1}}},
      {amqp_cstring_bytes("basic.nack"), {AMQP_FIELD_KIND_BOOLEAN, {.boolean = 1}}},
  };
  amqp_table_entry_t properties[2];
  properties[0].key = amqp_cstring_bytes("capabilities");
  properties[0].value.kind = AMQP_FIELD_KIND_TABLE;
  properties[0].value.value.table = {static_cast<int>(std::size(capabilities)), capabilities};
  properties[1].key = amqp_cstring_bytes("connection_name");
  properties[1].value.kind = AMQP_FIELD_KIND_UTF8;
  properties[1].value.value.bytes = amqp_cstring_bytes(options.connection_name.c_str());
  const amqp_table_t client_properties{options.connection_name.empty() ? 1 : 2, properties};
  const int heartbeat = static_cast<int>(options.heartbeat.count());
  const amqp_rpc_reply_t reply = amqp_login_with_properties(
      state_, uri.vhost.c_str(), 0, AMQP_DEFAULT_FRAME_SIZE, heartbeat, &client_properties,
      AMQP_SASL_METHOD_PLAIN, uri.user.c_str(), uri.password.c_str());
  if (reply.reply_type != AMQP_RESPONSE_NORMAL) {
    std::string why;
    int code = 0;
    if (reply.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION) {
      why = describe_close(reply.reply);
      if (reply.reply.id == AMQP_CONNECTION_CLOSE_METHOD)
        code = static_cast<const amqp_connection_close_t*>(reply.reply.decoded)->reply_code;
    } else if (reply.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION) {
      why = amqp_error_string2(reply.library_error);
    } else {
      why = "no reply";
    }
    amqp_destroy_connection(state_);
    state_ = nullptr;
    // 403 ACCESS_REFUSED (bad credentials), 530 NOT_ALLOWED (no such vhost or no access
    // to it). A socket closed during login is not taken for a refusal: RabbitMQ says
    // 403 (authentication_failure_close), and a broker still starting closes too.
    const bool auth = code == 403 || code == 530;
    throw AmqpError(
        auth ? AmqpError::Kind::auth : AmqpError::Kind::connection, code,
        common::redact_secret(
            "login to " + describe_ + " as user '" + uri.user + "' failed: " + why, uri.redacted) +
            (code == 530 ? " (does the vhost exist, may the user use it?)" : ""));
  }
  open_ = true;
}

Connection::~Connection() {
  if (!state_) return;
  if (open_) amqp_connection_close(state_, AMQP_REPLY_SUCCESS);
  amqp_destroy_connection(state_);
}

void Connection::fail_socket(const char* what, int status) {
  std::string message = describe_ + ": " + what + " failed: " + amqp_error_string2(status);
  amqp_destroy_connection(state_);
  state_ = nullptr;
  // A refused certificate or host name, or a port that does not speak TLS, will not
  // mend by trying again: configuration, not the network.
  const bool tls =
      status == AMQP_STATUS_SSL_ERROR || status == AMQP_STATUS_SSL_HOSTNAME_VERIFY_FAILED ||
      status == AMQP_STATUS_SSL_PEER_VERIFY_FAILED || status == AMQP_STATUS_SSL_CONNECTION_FAILED;
  throw AmqpError(tls ? AmqpError::Kind::tls : AmqpError::Kind::connection, 0, message);
}

int Connection::fd() const {
  return amqp_get_sockfd(state_);
}

std::map<std::string, std::string> Connection::server_properties() const {
  std::map<std::string, std::string> out;
  const amqp_table_t* table = amqp_get_server_properties(state_);
  for (int i = 0; table && i < table->num_entries; ++i) {
    const auto& e = table->entries[i];
    if (e.value.kind == AMQP_FIELD_KIND_UTF8 || e.value.kind == AMQP_FIELD_KIND_BYTES)
      out[text(e.key)] = text(e.value.value.bytes);
  }
  return out;
}

void Connection::check_reply(const char* what) {
  const amqp_rpc_reply_t reply = amqp_get_rpc_reply(state_);
  switch (reply.reply_type) {
    case AMQP_RESPONSE_NORMAL:
      return;
    case AMQP_RESPONSE_NONE:
      throw AmqpError(AmqpError::Kind::connection, 0,
                      std::string(what) + ": no reply from " + describe_);
    case AMQP_RESPONSE_LIBRARY_EXCEPTION: {
      const bool timeout = reply.library_error == AMQP_STATUS_TIMEOUT;
      if (!timeout) open_ = false;
      throw AmqpError(
          timeout ? AmqpError::Kind::timeout : AmqpError::Kind::connection, 0,
          std::string(what) + " on " + describe_ + ": " + amqp_error_string2(reply.library_error));
    }
    case AMQP_RESPONSE_SERVER_EXCEPTION:
      break;
  }
  const std::string why =
      std::string(what) + " on " + describe_ + ": " + describe_close(reply.reply);
  if (reply.reply.id == AMQP_CONNECTION_CLOSE_METHOD) {
    const int code = static_cast<const amqp_connection_close_t*>(reply.reply.decoded)->reply_code;
    amqp_connection_close_ok_t ok{};
    amqp_send_method(state_, 0, AMQP_CONNECTION_CLOSE_OK_METHOD, &ok);
    open_ = false;
    throw AmqpError(AmqpError::Kind::connection, code, why);
  }
  const int code = reply.reply.id == AMQP_CHANNEL_CLOSE_METHOD
                       ? static_cast<const amqp_channel_close_t*>(reply.reply.decoded)->reply_code
                       : 0;
  // Which channel closed is not in the reply; every caller names its own channel,
  // and the library answered nothing yet: the caller's close_channel() or the
  // close-ok below settles it.
  throw AmqpError(AmqpError::Kind::channel, code, why);
}

void Connection::open_channel(std::uint16_t channel) {
  amqp_channel_open(state_, channel);
  check_reply("opening a channel");
}

void Connection::close_channel(std::uint16_t channel) {
  if (!open_) return;
  amqp_channel_close(state_, channel, AMQP_REPLY_SUCCESS);
  const amqp_rpc_reply_t reply = amqp_get_rpc_reply(state_);
  if (reply.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION &&
      reply.library_error != AMQP_STATUS_TIMEOUT)
    open_ = false;
}

QueueInfo Connection::inspect_queue(std::uint16_t channel, const std::string& queue) {
  auto* ok = amqp_queue_declare(state_, channel, amqp_cstring_bytes(queue.c_str()), 1, 0, 0, 0,
                                amqp_empty_table);
  check_reply(("looking up the queue '" + queue + "'").c_str());
  return {ok->message_count, ok->consumer_count};
}

QueueInfo Connection::declare_queue(std::uint16_t channel, const std::string& queue,
                                    const QueueDeclaration& d) {
  amqp_table_entry_t arguments[5];
  int count = 0;
  auto add = [&](const char* key, amqp_field_value_t value) {
    arguments[count].key = amqp_cstring_bytes(key);
    arguments[count++].value = value;
  };
  auto text = [](const std::string& value) {
    amqp_field_value_t v{};
    v.kind = AMQP_FIELD_KIND_UTF8;
    v.value.bytes = amqp_cstring_bytes(value.c_str());
    return v;
  };
  static const std::string kQuorum = "quorum", kStream = "stream";
  if (d.quorum) add("x-queue-type", text(kQuorum));
  if (d.stream) add("x-queue-type", text(kStream));
  if (!d.dead_letter_exchange.empty() || !d.dead_letter_routing_key.empty())
    add("x-dead-letter-exchange", text(d.dead_letter_exchange));
  if (!d.dead_letter_routing_key.empty())
    add("x-dead-letter-routing-key", text(d.dead_letter_routing_key));
  if (d.delivery_limit > 0) {
    amqp_field_value_t v{};
    v.kind = AMQP_FIELD_KIND_I64;
    v.value.i64 = d.delivery_limit;
    add("x-delivery-limit", v);
  }
  if (d.single_active_consumer) {
    amqp_field_value_t v{};
    v.kind = AMQP_FIELD_KIND_BOOLEAN;
    v.value.boolean = 1;
    add("x-single-active-consumer", v);
  }
  auto* ok = amqp_queue_declare(state_, channel, amqp_cstring_bytes(queue.c_str()), 0, 1, 0, 0,
                                amqp_table_t{count, arguments});
  check_reply(("declaring the queue '" + queue + "'").c_str());
  return {ok->message_count, ok->consumer_count};
}

amqp_frame_t Connection::wait_method(std::chrono::steady_clock::time_point deadline,
                                     const char* what) {
  for (;;) {
    amqp_frame_t frame;
    timeval tv{1, 0};
    const int status = amqp_simple_wait_frame_noblock(state_, &frame, &tv);
    if (status == AMQP_STATUS_TIMEOUT) {
      if (std::chrono::steady_clock::now() > deadline)
        throw AmqpError(AmqpError::Kind::timeout, 0,
                        std::string("no ") + what + " from the broker in time");
      continue;
    }
    if (status != AMQP_STATUS_OK)
      throw AmqpError(AmqpError::Kind::connection, 0,
                      std::string("waiting for a ") + what + ": " + amqp_error_string2(status));
    if (frame.frame_type == AMQP_FRAME_METHOD) return frame;
  }
}

void Connection::inspect_exchange(std::uint16_t channel, const std::string& exchange) {
  amqp_exchange_declare(state_, channel, amqp_cstring_bytes(exchange.c_str()),
                        amqp_cstring_bytes("direct"), 1, 0, 0, 0, amqp_empty_table);
  check_reply(("looking up the exchange '" + exchange + "'").c_str());
}

void Connection::delete_queue(std::uint16_t channel, const std::string& queue) {
  amqp_queue_delete(state_, channel, amqp_cstring_bytes(queue.c_str()), 0, 0);
  check_reply(("deleting the queue '" + queue + "'").c_str());
}

void Connection::qos(std::uint16_t channel, std::uint16_t prefetch, bool whole_channel) {
  amqp_basic_qos(state_, channel, 0, prefetch, whole_channel ? 1 : 0);
  check_reply("setting the prefetch");
}

std::string Connection::consume(std::uint16_t channel, const std::string& queue,
                                const std::string& tag, const amqp_table_t& arguments) {
  auto* ok = amqp_basic_consume(state_, channel, amqp_cstring_bytes(queue.c_str()),
                                amqp_cstring_bytes(tag.c_str()), 0, 0, 0, arguments);
  check_reply(("consuming from the queue '" + queue + "'").c_str());
  return text(ok->consumer_tag);
}

void Connection::cancel(std::uint16_t channel, const std::string& consumer_tag) {
  amqp_basic_cancel_t cancel{};
  cancel.consumer_tag = amqp_cstring_bytes(consumer_tag.c_str());
  send_method(channel, AMQP_BASIC_CANCEL_METHOD, &cancel);
}

void Connection::confirm_select(std::uint16_t channel) {
  amqp_confirm_select(state_, channel);
  check_reply("turning on publisher confirms");
}

void Connection::set_call_timeout(std::chrono::milliseconds timeout) {
  timeval tv{static_cast<time_t>(timeout.count() / 1000),
             static_cast<suseconds_t>(timeout.count() % 1000 * 1000)};
  amqp_set_rpc_timeout(state_, &tv);
}

void Connection::send_method(std::uint16_t channel, amqp_method_number_t id, void* decoded) {
  if (const int status = amqp_send_method(state_, channel, id, decoded); status != AMQP_STATUS_OK) {
    open_ = false;
    throw AmqpError(AmqpError::Kind::connection, 0,
                    "sending to " + describe_ + " failed: " + amqp_error_string2(status));
  }
}

void Connection::ack(std::uint16_t channel, std::uint64_t tag, bool multiple) {
  amqp_basic_ack_t m{tag, multiple ? amqp_boolean_t(1) : amqp_boolean_t(0)};
  send_method(channel, AMQP_BASIC_ACK_METHOD, &m);
}

void Connection::nack(std::uint16_t channel, std::uint64_t tag, bool requeue) {
  amqp_basic_nack_t m{tag, 0, requeue ? amqp_boolean_t(1) : amqp_boolean_t(0)};
  send_method(channel, AMQP_BASIC_NACK_METHOD, &m);
}

void Connection::reject(std::uint16_t channel, std::uint64_t tag, bool requeue) {
  amqp_basic_reject_t m{tag, requeue ? amqp_boolean_t(1) : amqp_boolean_t(0)};
  send_method(channel, AMQP_BASIC_REJECT_METHOD, &m);
}

}  // namespace sluice::amqp
