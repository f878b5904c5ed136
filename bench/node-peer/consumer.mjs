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
import { createHash } from "node:crypto";
import { DeleteMessageBatchCommand, ReceiveMessageCommand, SQSClient } from "@aws-sdk/client-sqs";
import pg from "pg";
import { Consumer } from "sqs-consumer";

const [mode, queueUrl, endpoint, dsn, table] = process.argv.slice(2);
if (mode !== "sqs-consumer" && mode !== "pool") {
  console.error("usage: node consumer.mjs sqs-consumer|pool QUEUE_URL ENDPOINT DSN TABLE");
  process.exit(2);
}
const config = Object.fromEntries(dsn.split(" ").map((kv) => kv.split("=")));
const pool = new pg.Pool({ host: config.host, port: Number(config.port), user: config.user,
                           database: config.dbname, max: 8 });
await pool.query(`CREATE TABLE IF NOT EXISTS "${table}" (hash text NOT NULL, message_id text,
                  document jsonb NOT NULL, written_at timestamptz NOT NULL DEFAULT now())`);
await pool.query(`CREATE UNIQUE INDEX IF NOT EXISTS "uniq_${table}_hash" ON "${table}" (hash)`);

const sqs = new SQSClient({ endpoint, region: "us-east-1",
                            credentials: { accessKeyId: "AKIDLOCAL", secretAccessKey: "local" } });
process.on("SIGTERM", () => process.exit(0));

function normalize(message) {
  const body = JSON.parse(message.Body);
  for (const f of ["skuId", "locationId", "eventType", "quantity"])
    if (body[f] === undefined || body[f] === null) throw new Error(`missing ${f}`);
  const quantity = Number.parseInt(body.quantity, 10);
  const doc = { skuId: String(body.skuId), locationId: String(body.locationId),
                eventType: String(body.eventType), quantity, eventId: body.eventId ?? null };
  const hash = "V1:" + createHash("sha256")
      .update(JSON.stringify([doc.skuId, doc.locationId, doc.eventType, doc.quantity])).digest("hex");
  return { hash, id: message.MessageId, doc: { ...doc, documentHash: hash } };
}

async function write(messages) {
  const rows = messages.map(normalize);
  const values = [], params = [];
  rows.forEach((r, i) => {
    values.push(`($${3 * i + 1}, $${3 * i + 2}, $${3 * i + 3}::jsonb)`);
    params.push(r.hash, r.id, JSON.stringify(r.doc));
  });
  await pool.query(`INSERT INTO "${table}" (hash, message_id, document) VALUES ${values.join(",")}
                    ON CONFLICT (hash) DO NOTHING`, params);
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
