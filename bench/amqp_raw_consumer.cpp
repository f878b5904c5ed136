// The ceiling of bench_amqp: a bare rabbitmq-c consumer doing no work. Prefetch 250,
// manual acks with multiple=true every 50 deliveries (and at the end), exits once it
// has acked COUNT messages. Plain rabbitmq-c, none of Sluice's code.
// Usage: bench_amqp_raw HOST PORT QUEUE COUNT
#include <amqp.h>
#include <amqp_tcp_socket.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s HOST PORT QUEUE COUNT\n", argv[0]);
    return 2;
  }
  const long count = std::atol(argv[4]);
  amqp_connection_state_t conn = amqp_new_connection();
  amqp_socket_t* socket = amqp_tcp_socket_new(conn);
  if (amqp_socket_open(socket, argv[1], std::atoi(argv[2])) != AMQP_STATUS_OK) return 1;
  if (amqp_login(conn, "/", 0, AMQP_DEFAULT_FRAME_SIZE, 60, AMQP_SASL_METHOD_PLAIN, "guest",
                 "guest")
          .reply_type != AMQP_RESPONSE_NORMAL)
    return 1;
  amqp_channel_open(conn, 1);
  amqp_basic_qos(conn, 1, 0, 250, 0);
  amqp_basic_consume(conn, 1, amqp_cstring_bytes(argv[3]), amqp_empty_bytes, 0, 0, 0,
                     amqp_empty_table);
  if (amqp_get_rpc_reply(conn).reply_type != AMQP_RESPONSE_NORMAL) return 1;
  long received = 0;
  std::uint64_t last_tag = 0;
  int unacked = 0;
  while (received < count) {
    amqp_envelope_t envelope;
    amqp_maybe_release_buffers(conn);
    const amqp_rpc_reply_t reply = amqp_consume_message(conn, &envelope, nullptr, 0);
    if (reply.reply_type != AMQP_RESPONSE_NORMAL) return 1;
    ++received;
    last_tag = envelope.delivery_tag;
    amqp_destroy_envelope(&envelope);
    if (++unacked >= 50 || received == count) {
      amqp_basic_ack(conn, 1, last_tag, 1);
      unacked = 0;
    }
  }
  amqp_channel_close(conn, 1, AMQP_REPLY_SUCCESS);
  amqp_connection_close(conn, AMQP_REPLY_SUCCESS);
  amqp_destroy_connection(conn);
  return 0;
}
