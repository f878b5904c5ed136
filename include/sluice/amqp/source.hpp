#pragma once
// A RabbitMQ queue (AMQP 0-9-1) as a container's source:
//
//   sluice::Container container(options, sluice::make_amqp_source({.uri = ..., .queue = ...}),
//                               handler);
//
// Consumers are added and removed by load between a minimum and a maximum, as Spring
// AMQP's SimpleMessageListenerContainer does (the rule is in docs/rabbitmq.md); each
// has its own channel. One I/O thread owns the connection (rabbitmq-c is not
// thread-safe) and keeps its heartbeats; handlers settle through it. Acks go as
// basic.ack with multiple=true over each channel's contiguous settled prefix; retries
// are held here for their backoff, then returned with basic.reject (requeue); rejects are
// basic.reject without requeue (the queue's dead-letter exchange, if it has one).
// Never more unacknowledged deliveries than the container's max_in_flight: each
// consumer's prefetch is at most max_in_flight / max consumers.

#include <chrono>
#include <string>

#include "sluice/source.hpp"

namespace sluice {

struct AmqpSourceOptions {
  std::string uri = "amqp://guest:guest@127.0.0.1:5672/%2f";  // amqp[s]://user:pass@host:port/vhost
  std::string queue;
  int min_consumers = 1;  // Spring's concurrentConsumers ...
  int max_consumers = 1;  // ... and maxConcurrentConsumers ("2-8")
  int prefetch = 250;     // per consumer; raised to batch_size, lowered to max_in_flight / max
  int batch_size = 1;     // deliveries per consumer cycle (Spring's batchSize)
  std::chrono::milliseconds receive_timeout{1000};
  int consecutive_active_trigger = 10;
  int consecutive_idle_trigger = 10;
  std::chrono::milliseconds start_consumer_min_interval{10000};
  std::chrono::milliseconds stop_consumer_min_interval{60000};
  // A lost connection or channel is recovered after a backoff doubling up to this.
  std::chrono::milliseconds recovery_interval{5000};
  // A retry is held here (unacknowledged) for its backoff, at most this long (and at
  // most half of consumer_timeout), then returned (basic.reject, requeue).
  std::chrono::milliseconds retry_hold_max{std::chrono::minutes(5)};
  // The broker's consumer_timeout (rabbitmq.conf; 30 min by default) or the queue's
  // x-consumer-timeout, as far as Sluice knows it (AMQP 0-9-1 cannot read either): a
  // channel closed for a delivery held longer is recognized whatever this says; this
  // caps retry holds and names the timeout when the broker's text does not. 0: none.
  std::chrono::milliseconds consumer_timeout{std::chrono::minutes(30)};
  // The queue is a single-active-consumer queue (x-single-active-consumer): its
  // deliveries are one ordered group, in the queue's order across instances (only the
  // active consumer receives). One consumer; a failure or release rewinds: the channel
  // is closed (acks sent first), every delivery it held goes back in order, and the
  // queue's head comes again after the failure's backoff. See docs/rabbitmq.md.
  bool single_active_consumer = false;
  // The queue is a stream (x-queue-type: stream), read from here the first time: "first",
  // "last", "next", an offset ("12345") or a UTC time ("2026-12-01T08:00:00Z"); empty: not
  // a stream. The broker keeps no position for AMQP 0-9-1 consumers: the source saves
  // the last offset it has handled along with every one before it in the container's
  // PositionStore (key "rabbitmq vhost=VHOST queue=QUEUE pipeline=CONTAINER", about
  // every second and at a stop), offers each batch's offset to the writers to commit
  // with its rows (spi::BatchPositions, key ...#rows), and resumes after the further. One consumer
  // (each consumer of a stream reads all of it); a failure or release re-reads the stream from the
  // oldest message not yet handled, after the failure's backoff; a reject is acked (a stream has no
  // dead-lettering).
  std::string stream_offset;
  std::chrono::seconds heartbeat{60};
  std::string connection_name = "sluice";
  std::string ca_file;  // amqps: the CA bundle that signed the broker's certificate
  bool verify_hostname = true;
};

// Throws std::invalid_argument naming the option, its value and what was expected
// (never repeating the URI's password).
void validate(const AmqpSourceOptions& options);

// Validates the options; connects when the container starts.
SourceFactory make_amqp_source(AmqpSourceOptions options);

}  // namespace sluice
