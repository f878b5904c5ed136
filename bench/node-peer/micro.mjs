// The JS SDK peer of bench_micro's BM_ReceiveClientWork_Sluice: one ReceiveMessage's
// client-side work without the network. @aws-sdk/client-sqs builds and signs a fresh
// request (its own clock), then parses the same 10-message answer (bench_micro writes
// it: BENCH_DUMP_RESPONSE) and checks each MD5OfBody (the SDK's SQS middleware), as
// every real call does; the request handler hands the bytes back from memory.
// Prints microseconds per call, the median of three rounds (as bench_micro reports).
// Usage: node micro.mjs RESPONSE_FILE
import { readFileSync } from "node:fs";
import { Readable } from "node:stream";
import { ReceiveMessageCommand, SQSClient } from "@aws-sdk/client-sqs";
import { HttpResponse } from "@smithy/core/transport";

const answer = readFileSync(process.argv[2]);
const requestHandler = {
  handle: async () => ({
    response: new HttpResponse({
      statusCode: 200,
      headers: { "content-type": "application/x-amz-json-1.0" },
      body: Readable.from([answer]),
    }),
  }),
};
const sqs = new SQSClient({
  region: "us-east-1",
  credentials: { accessKeyId: "AKIDEXAMPLE", secretAccessKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
                 sessionToken: "session-token-example" },
  requestHandler,
});
const call = () => sqs.send(new ReceiveMessageCommand({
  QueueUrl: "https://sqs.us-east-1.amazonaws.com/123456789012/inventory-events",
  MaxNumberOfMessages: 10, WaitTimeSeconds: 20,
  MessageSystemAttributeNames: ["All"], MessageAttributeNames: ["All"] }));

for (let i = 0; i < 2000; i++) {  // warm-up (the JIT), and a check that it parsed
  const out = await call();
  if (out.Messages.length !== 10) throw new Error("expected 10 messages");
}
const rounds = [];
for (let round = 0; round < 3; round++) {
  const n = 10000;
  const start = process.hrtime.bigint();
  for (let i = 0; i < n; i++) await call();
  rounds.push(Number(process.hrtime.bigint() - start) / 1000 / n);
}
rounds.sort((a, b) => a - b);
console.log(`js_sdk_receive_client_work_us ${rounds[1].toFixed(2)}`);
