#!/usr/bin/python3
"""An independent AMQP publisher for the tests (Debian's python3-pika): publishes
COUNT JSON messages to QUEUE through the default exchange, with confirms, each with
a message id, a content type, a timestamp and headers of several types.
Usage: pika_publish.py AMQP_URL QUEUE COUNT"""
import json
import sys

import pika

url, queue, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
connection = pika.BlockingConnection(pika.URLParameters(url))
channel = connection.channel()
channel.confirm_delivery()
for i in range(count):
    channel.basic_publish(
        exchange="",
        routing_key=queue,
        body=json.dumps({"n": i, "from": "pika"}).encode(),
        properties=pika.BasicProperties(
            message_id=f"pika-{i}",
            content_type="application/json",
            delivery_mode=2,
            timestamp=1700000000 + i,
            headers={"origin": "pika", "attempt": i, "flag": True},
        ),
        mandatory=True,
    )
connection.close()
