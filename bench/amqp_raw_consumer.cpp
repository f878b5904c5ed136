// The ceilings of bench_amqp: a bare rabbitmq-c consumer on one channel.
//  - Without a database (the no-work ceiling): prefetch 250, manual acks with
//    multiple=true every 50 deliveries (and at the end), no work; exits once it has
//    acked COUNT messages.
//  - With DSN TABLE ROWS (the database ceiling): the same database work as the pipeline
//    (bench/pg_rows.hpp: the very rows `sluice run` writes, found by the MD5 of each
//    body, with the PostgreSQL sink's statement and group commit, 4 connections);
//    prefetch PREFETCH (1000 by default: what `sluice run` holds with 4 consumers of
//    250); a delivery is acked once its row is written, with multiple=true over the
//    written prefix (as Sluice's ack tracker does); exits once COUNT are acked. What it
//    does not do is decode, normalize or hash: the pipeline's own work.
// Plain rabbitmq-c and libpq (and OpenSSL's MD5), none of Sluice's code.
// Usage: bench_amqp_raw HOST PORT QUEUE COUNT [DSN TABLE ROWS [PREFETCH]]
#include <amqp.h>
#include <amqp_tcp_socket.h>
#include <openssl/evp.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "pg_rows.hpp"

namespace {

std::string md5_hex(const void* data, std::size_t size) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_Digest(data, size, digest, &length, EVP_md5(), nullptr);
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < length; ++i) {
    out += hex[digest[i] >> 4];
    out += hex[digest[i] & 15];
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5 && argc != 8 && argc != 9) {
    std::fprintf(stderr, "usage: %s HOST PORT QUEUE COUNT [DSN TABLE ROWS [PREFETCH]]\n", argv[0]);
    return 2;
  }
  const long count = std::atol(argv[4]);
  const bool database = argc >= 8;
  const int prefetch = argc == 9 ? std::atoi(argv[8]) : database ? 1000 : 250;
  amqp_connection_state_t conn = amqp_new_connection();
  amqp_socket_t* socket = amqp_tcp_socket_new(conn);
  if (amqp_socket_open(socket, argv[1], std::atoi(argv[2])) != AMQP_STATUS_OK) return 1;
  if (amqp_login(conn, "/", 0, AMQP_DEFAULT_FRAME_SIZE, 60, AMQP_SASL_METHOD_PLAIN, "guest",
                 "guest")
          .reply_type != AMQP_RESPONSE_NORMAL)
    return 1;
  amqp_channel_open(conn, 1);
  amqp_basic_qos(conn, 1, 0, static_cast<std::uint16_t>(prefetch), 0);
  amqp_basic_consume(conn, 1, amqp_cstring_bytes(argv[3]), amqp_empty_bytes, 0, 0, 0,
                     amqp_empty_table);
  if (amqp_get_rpc_reply(conn).reply_type != AMQP_RESPONSE_NORMAL) return 1;

  if (!database) {
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
  } else {
    const auto known = sluice::bench::load_rows(argv[7]);
    if (known.empty()) {
      std::fprintf(stderr, "bench_amqp_raw: no rows in %s\n", argv[7]);
      return 1;
    }
    // The writers hand back the tags they wrote; this thread (rabbitmq-c's only one)
    // acks the written prefix.
    std::mutex mutex;
    std::vector<std::uint64_t> written;
    sluice::bench::RowWriters writers(argv[5], argv[6], "unnest",
                                      [&](std::vector<sluice::bench::PendingRow>&& rows) {
                                        std::lock_guard lock(mutex);
                                        for (const auto& row : rows) written.push_back(row.tag);
                                      });
    std::set<std::uint64_t> done;  // written, past the acked prefix
    std::uint64_t acked = 0;       // every tag up to it is acked
    std::vector<std::uint64_t> taken;
    while (static_cast<long>(acked) < count) {
      amqp_envelope_t envelope;
      amqp_maybe_release_buffers(conn);
      timeval tick{0, 2000};
      const amqp_rpc_reply_t reply = amqp_consume_message(conn, &envelope, &tick, 0);
      if (reply.reply_type == AMQP_RESPONSE_NORMAL) {
        const auto row =
            known.find(md5_hex(envelope.message.body.bytes, envelope.message.body.len));
        if (row == known.end()) {
          std::fprintf(stderr, "bench_amqp_raw: a body the rows file does not know\n");
          return 1;
        }
        std::vector<sluice::bench::PendingRow> one;
        one.push_back({&row->second.first, &row->second.second,
                       std::to_string(envelope.delivery_tag), "", envelope.delivery_tag});
        writers.add(std::move(one));
        amqp_destroy_envelope(&envelope);
      } else if (!(reply.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION &&
                   reply.library_error == AMQP_STATUS_TIMEOUT)) {
        return 1;
      }
      {
        std::lock_guard lock(mutex);
        taken.swap(written);
      }
      done.insert(taken.begin(), taken.end());
      taken.clear();
      std::uint64_t prefix = acked;
      while (!done.empty() && *done.begin() == prefix + 1) {
        prefix = *done.begin();
        done.erase(done.begin());
      }
      if (prefix > acked) {
        amqp_basic_ack(conn, 1, prefix, 1);
        acked = prefix;
      }
    }
  }
  amqp_channel_close(conn, 1, AMQP_REPLY_SUCCESS);
  amqp_connection_close(conn, AMQP_REPLY_SUCCESS);
  amqp_destroy_connection(conn);
  return 0;
}
