"""Makes CloudWatch and ECS calls with botocore (the AWS CLI's library), independently
of Sluice, against a loopback endpoint that records them: the serialization Sluice's
clients must match byte for byte.

Usage: /usr/bin/python3 botocore_calls.py ENDPOINT CASES.jsonl
Each case: {"call": "put_metric_data"|"get_metric_data"|"describe_services", "args": {...}}
with the arguments in the order Sluice sends them (botocore keeps the caller's order);
get_metric_data's StartTime/EndTime are epoch seconds.
"""
import datetime
import json
import sys

import botocore.session
from botocore.config import Config


def main(endpoint, cases_path):
    session = botocore.session.get_session()
    config = Config(retries={"max_attempts": 1})
    clients = {
        name: session.create_client(name, region_name="us-east-1", endpoint_url=endpoint,
                                    aws_access_key_id="AKIDEXAMPLE",
                                    aws_secret_access_key="wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
                                    config=config)
        for name in ("cloudwatch", "ecs")
    }
    with open(cases_path, encoding="utf-8") as cases:
        for line in cases:
            case = json.loads(line)
            args = case["args"]
            if case["call"] == "put_metric_data":
                clients["cloudwatch"].put_metric_data(**args)
            elif case["call"] == "get_metric_data":
                for key in ("StartTime", "EndTime"):
                    args[key] = datetime.datetime.fromtimestamp(args[key], tz=datetime.timezone.utc)
                clients["cloudwatch"].get_metric_data(**args)
            elif case["call"] == "describe_services":
                clients["ecs"].describe_services(**args)
            else:
                raise ValueError(case["call"])


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
