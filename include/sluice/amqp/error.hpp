#pragma once
// What the RabbitMQ publisher (and the AMQP layer under it) throws: the error's class,
// so that a caller can tell a refused login from a lost connection, and the broker's
// AMQP reply code.

#include <stdexcept>
#include <string>

namespace sluice::amqp {

class AmqpError : public std::runtime_error {
 public:
  enum class Kind {
    connection,  // the connection is gone (network, closed by the broker, heartbeat)
    channel,     // the broker closed one channel (reply_code says why)
    auth,        // login refused (403 ACCESS_REFUSED, 530 NOT_ALLOWED for the vhost)
    tls,         // the TLS handshake failed (certificate, host name, not a TLS port)
    timeout,     // a synchronous call had no answer in rpc_timeout
  };
  AmqpError(Kind kind, int reply_code, const std::string& what)
      : std::runtime_error(what), kind_(kind), reply_code_(reply_code) {}
  Kind kind() const { return kind_; }
  int reply_code() const { return reply_code_; }  // AMQP reply code (404, 403, 406...), or 0
  bool not_found() const { return reply_code_ == 404; }

 private:
  Kind kind_;
  int reply_code_;
};

}  // namespace sluice::amqp
