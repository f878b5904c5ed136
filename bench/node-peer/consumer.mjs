// The Node peers of bench_pipeline: the same work as `sluice run` (decode, normalize,
// SHA-256 content hash, insert-first into PostgreSQL under a unique index, delete after
// the write), written the way a Node team would, in two shapes:
//   sqs-consumer  eight sqs-consumer instances with a batch handler (one sqs-consumer
//                 polls only after its batch is done) and one multi-row
//                 INSERT ... ON CONFLICT DO NOTHING per batch;
//   pool          sixteen loops on one @aws-sdk client: ReceiveMessage (10, 1 s wait),
//                 one multi-row INSERT, then DeleteMessageBatch.
// Both ask for every attribute, as `sluice run` and the ceiling do.
// Both write through a pg pool of 8 (per-message inserts would be slower: this is
// Node's best case). Runs until SIGTERM; the harness times it from outside.
// Usage: node consumer.mjs sqs-consumer|pool QUEUE_URL ENDPOINT DSN TABLE
import { DeleteMessageBatchCommand, ReceiveMessageCommand, SQSClient } from "@aws-sdk/client-sqs";
import { Consumer } from "sqs-consumer";
import { insertRecords, openTable, record } from "./work.mjs";

const [mode, queueUrl, endpoint, dsn, table] = process.argv.slice(2);
if (mode !== "sqs-consumer" && mode !== "pool") {
  console.error("usage: node consumer.mjs sqs-consumer|pool QUEUE_URL ENDPOINT DSN TABLE");
  process.exit(2);
}
const pool = await openTable(dsn, table, 8);

const sqs = new SQSClient({ endpoint, region: "us-east-1",
                            credentials: { accessKeyId: "AKIDLOCAL", secretAccessKey: "local" } });
process.on("SIGTERM", () => process.exit(0));

async function write(messages) {
  await insertRecords(pool, table, messages.map((m) => record(m.Body, m.MessageId)));
}

if (mode === "sqs-consumer") {
  for (let i = 0; i < 8; i++) {
    const consumer = Consumer.create({
      queueUrl, sqs, batchSize: 10, waitTimeSeconds: 1, shouldDeleteMessages: true,
      messageAttributeNames: ["All"], messageSystemAttributeNames: ["All"],
      handleMessageBatch: async (messages) => {
        await write(messages);
        return messages;
      },
    });
    consumer.on("error", (e) => console.error("consumer error", e.message));
    consumer.start();
  }
} else {
  const loop = async () => {
    for (;;) {
      try {
        const { Messages: messages = [] } = await sqs.send(new ReceiveMessageCommand({
          QueueUrl: queueUrl, MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
          MessageAttributeNames: ["All"], MessageSystemAttributeNames: ["All"] }));
        if (messages.length === 0) continue;
        await write(messages);
        await sqs.send(new DeleteMessageBatchCommand({ QueueUrl: queueUrl,
          Entries: messages.map((m, i) => ({ Id: String(i), ReceiptHandle: m.ReceiptHandle })) }));
      } catch (e) {
        console.error("loop error", e.message);
      }
    }
  };
  for (let i = 0; i < 16; i++) loop();
}
