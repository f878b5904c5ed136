"""Peer figure: botocore (the AWS CLI's signer) signing the same SQS request as
BM_SignSqsRequest, a fresh timestamp each time (the AWSRequest is built per call, as
botocore does for every call). Prints microseconds per signature, the median of three."""
import statistics
import timeit

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

BODY = ('{"QueueUrl":"https://sqs.us-east-1.amazonaws.com/123456789012/inventory-events",'
        '"MaxNumberOfMessages":10,"WaitTimeSeconds":20,"MessageSystemAttributeNames":["All"],'
        '"MessageAttributeNames":["All"]}')
creds = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "session-token-example")
signer = SigV4Auth(creds, "sqs", "us-east-1")


def sign():
    r = AWSRequest(method="POST", url="https://sqs.us-east-1.amazonaws.com/", data=BODY,
                   headers={"Content-Type": "application/x-amz-json-1.0",
                            "X-Amz-Target": "AmazonSQS.ReceiveMessage"})
    signer.add_auth(r)


n = 20000
seconds = statistics.median(timeit.repeat(sign, number=n, repeat=3))  # as bench_micro reports
print(f"botocore_sign_sqs_request_us {seconds / n * 1e6:.2f}")
