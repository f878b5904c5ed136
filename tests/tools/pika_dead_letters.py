#!/usr/bin/python3
"""Takes every message off QUEUE (Debian's python3-pika, an independent client) and
prints one line per message: its message id, then each x-death entry as
reason:queue:count, as the broker wrote them.
Usage: pika_dead_letters.py AMQP_URL QUEUE"""
import sys

import pika

url, queue = sys.argv[1], sys.argv[2]
connection = pika.BlockingConnection(pika.URLParameters(url))
channel = connection.channel()
while True:
    method, properties, _ = channel.basic_get(queue, auto_ack=True)
    if method is None:
        break
    deaths = (properties.headers or {}).get("x-death", [])
    print(properties.message_id,
          *[f"{d['reason']}:{d['queue']}:{d['count']}" for d in deaths])
connection.close()
