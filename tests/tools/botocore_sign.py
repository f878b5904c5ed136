"""Signs requests with botocore (the signer behind the AWS CLI), independently of Sluice.

Usage: /usr/bin/python3 botocore_sign.py IN.jsonl OUT.jsonl
Each input line: method, url, headers [[name, value]...], body, access_key,
secret_key, token, region, service, timestamp (YYYYmmddTHHMMSSZ). Each output
line: {"authorization": ..., "x_amz_date": ...}. With "s3": true the request is
signed by botocore's S3 signer (S3SigV4Auth), the payload signed or not as
"sign_payload" says (botocore's s3 payload_signing_enabled).
"""
import datetime
import json
import sys
import types

import botocore.auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

_now = [None]


class _FixedDatetime(datetime.datetime):
    @classmethod
    def utcnow(cls):
        return _now[0]


# botocore reads the clock through its module's `datetime` name: pin it per request.
botocore.auth.datetime = types.SimpleNamespace(datetime=_FixedDatetime, timedelta=datetime.timedelta)


def main(src, dst):
    with open(src, encoding="utf-8") as inp, open(dst, "w", encoding="utf-8") as out:
        for line in inp:
            case = json.loads(line)
            _now[0] = datetime.datetime.strptime(case["timestamp"], "%Y%m%dT%H%M%SZ")
            creds = Credentials(case["access_key"], case["secret_key"], case["token"] or None)
            request = AWSRequest(method=case["method"], url=case["url"],
                                 data=case["body"].encode("utf-8"))
            for name, value in case["headers"]:
                request.headers[name] = value
            if case.get("s3"):
                request.context["client_config"] = types.SimpleNamespace(
                    s3={"payload_signing_enabled": case["sign_payload"]})
                signer = botocore.auth.S3SigV4Auth(creds, "s3", case["region"])
            else:
                signer = botocore.auth.SigV4Auth(creds, case["service"], case["region"])
            signer.add_auth(request)
            out.write(json.dumps({"authorization": request.headers["Authorization"],
                                  "x_amz_date": request.headers["X-Amz-Date"],
                                  "content_sha256": request.headers.get("X-Amz-Content-SHA256")})
                      + "\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
