#!/usr/bin/python3
"""Sends one message to a local SQS server in SQS's JSON protocol, unsigned and with no
check of its size on this side (Sluice's client and the AWS SDKs refuse a body over
1 MiB before sending): what the server takes is the server's to say. Prints
"sent <MessageId>", or "refused <type>: <message>" (exit 1).
Usage: sqs_send_unchecked.py ENDPOINT QUEUE_URL BODY_FILE"""
import json
import sys
import urllib.error
import urllib.request

endpoint, queue_url, body_file = sys.argv[1:4]
with open(body_file, encoding="utf-8") as f:
    body = f.read()
request = urllib.request.Request(
    endpoint, data=json.dumps({"QueueUrl": queue_url, "MessageBody": body}).encode(),
    headers={"Content-Type": "application/x-amz-json-1.0",
             "X-Amz-Target": "AmazonSQS.SendMessage"})
try:
    with urllib.request.urlopen(request, timeout=30) as answer:
        print("sent", json.loads(answer.read())["MessageId"])
except urllib.error.HTTPError as e:
    error = json.loads(e.read() or b"{}")
    kind = error.get("__type", str(e.code)).split("#")[-1]
    print("refused", kind + ":", error.get("message", error.get("Message", "")))
    sys.exit(1)
