#!/usr/bin/python3
"""An independent AMQP publisher for the tests (Debian's python3-pika): publishes
COUNT JSON messages to QUEUE through the default exchange, with confirms, each with
a message id, a content type, a timestamp and headers of several types. With TRACE_ID,
each also passes a trace on as OpenTelemetry's AMQP instrumentations do: message i
carries traceparent 00-TRACE_ID-<span id i+1, 16 hex digits>-01 and tracestate
vendor=pika.
Usage: pika_publish.py AMQP_URL QUEUE COUNT [TRACE_ID]"""
import json
import sys

import pika

url, queue, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
trace_id = sys.argv[4] if len(sys.argv) > 4 else None
connection = pika.BlockingConnection(pika.URLParameters(url))
channel = connection.channel()
channel.confirm_delivery()
for i in range(count):
    headers = {"origin": "pika", "attempt": i, "flag": True}
    if trace_id:
        headers["traceparent"] = f"00-{trace_id}-{i + 1:016x}-01"
        headers["tracestate"] = "vendor=pika"
    channel.basic_publish(
        exchange="",
        routing_key=queue,
        body=json.dumps({"n": i, "from": "pika", "id": f"pika-{i}", "amount": i}).encode(),
        properties=pika.BasicProperties(
            message_id=f"pika-{i}",
            content_type="application/json",
            delivery_mode=2,
            timestamp=1700000000 + i,
            headers=headers,
        ),
        mandatory=True,
    )
connection.close()
