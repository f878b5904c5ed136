#!/usr/bin/python3
"""Reads a collection back with pymongo (Debian's python3-pymongo), an independent
MongoDB client, and prints one JSON line per document: each field's BSON type as
pymongo decodes it (Decimal128, datetime, str, int, ...) and its value as text, nested
fields by their dotted path.
Usage: mongo_types.py URI DATABASE COLLECTION"""
import json
import sys

import pymongo

uri, database, collection = sys.argv[1], sys.argv[2], sys.argv[3]
client = pymongo.MongoClient(uri, serverSelectionTimeoutMS=10000)


def flatten(document, prefix=""):
    out = {}
    for key, value in document.items():
        path = prefix + key
        if isinstance(value, dict):
            out.update(flatten(value, path + "."))
        else:
            text = value.isoformat() if hasattr(value, "isoformat") else str(value)
            out[path] = {"type": type(value).__name__, "value": text}
    return out


for document in client[database][collection].find():
    print(json.dumps(flatten(document), sort_keys=True))
