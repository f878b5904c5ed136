#!/usr/bin/python3
"""A producer that passes its trace on as W3C headers, as OpenTelemetry's AMQP
instrumentations do (Debian's python3-pika): publishes COUNT JSON messages to QUEUE
through the default exchange, with confirms; message i carries
traceparent 00-TRACE_ID-<span id i+1, 16 hex digits>-01 and tracestate vendor=pika.
Usage: pika_traced.py AMQP_URL QUEUE COUNT TRACE_ID"""
import json
import sys

import pika

url, queue, count, trace_id = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
connection = pika.BlockingConnection(pika.URLParameters(url))
channel = connection.channel()
channel.confirm_delivery()
for i in range(count):
    channel.basic_publish(
        exchange="",
        routing_key=queue,
        body=json.dumps({"id": f"pika-{i}", "amount": i}).encode(),
        properties=pika.BasicProperties(
            message_id=f"pika-{i}",
            content_type="application/json",
            delivery_mode=2,
            headers={"traceparent": f"00-{trace_id}-{i + 1:016x}-01", "tracestate": "vendor=pika"},
        ),
        mandatory=True,
    )
connection.close()
