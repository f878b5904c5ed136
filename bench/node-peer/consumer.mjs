// The Node peer of bench_pipeline: the same work as `sluice run` (decode, normalize,
// SHA-256 content hash, insert-first into PostgreSQL under a unique index), written
// the way a Node team would: sqs-consumer with a batch handler and one multi-row
// INSERT ... ON CONFLICT DO NOTHING per batch (the best case for Node; per-message
// inserts are slower). Eight consumers run at once, since one sqs-consumer polls
// only after its batch is done.
// Usage: node consumer.mjs QUEUE_URL ENDPOINT DSN TABLE COUNT
import { createHash } from "node:crypto";
import { SQSClient } from "@aws-sdk/client-sqs";
import pg from "pg";
import { Consumer } from "sqs-consumer";

const [queueUrl, endpoint, dsn, table, countText] = process.argv.slice(2);
const count = Number(countText);
const config = Object.fromEntries(dsn.split(" ").map((kv) => kv.split("=")));
const pool = new pg.Pool({ host: config.host, port: Number(config.port), user: config.user,
                           database: config.dbname, max: 8 });
await pool.query(`CREATE TABLE IF NOT EXISTS "${table}" (hash text NOT NULL, message_id text,
                  document jsonb NOT NULL, written_at timestamptz NOT NULL DEFAULT now())`);
await pool.query(`CREATE UNIQUE INDEX IF NOT EXISTS "uniq_${table}_hash" ON "${table}" (hash)`);

const sqs = new SQSClient({ endpoint, region: "us-east-1",
                            credentials: { accessKeyId: "AKIDLOCAL", secretAccessKey: "local" } });
let done = 0;
const started = Date.now();
const cpu0 = process.cpuUsage();

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

const consumers = [];
const finished = new Promise((resolve) => {
  for (let i = 0; i < 8; i++) {
    const consumer = Consumer.create({
      queueUrl, sqs, batchSize: 10, waitTimeSeconds: 1, shouldDeleteMessages: true,
      handleMessageBatch: async (messages) => {
        const rows = messages.map(normalize);
        const values = [], params = [];
        rows.forEach((r, i) => {
          values.push(`($${3 * i + 1}, $${3 * i + 2}, $${3 * i + 3}::jsonb)`);
          params.push(r.hash, r.id, JSON.stringify(r.doc));
        });
        await pool.query(`INSERT INTO "${table}" (hash, message_id, document) VALUES ${values.join(",")}
                          ON CONFLICT (hash) DO NOTHING`, params);
        done += messages.length;
        if (done >= count) resolve();
        return messages;
      },
    });
    consumer.on("error", (e) => console.error("consumer error", e.message));
    consumer.start();
    consumers.push(consumer);
  }
});
await finished;
const seconds = (Date.now() - started) / 1000;
const cpu = process.cpuUsage(cpu0);
const rows = (await pool.query(`SELECT count(*) FROM "${table}"`)).rows[0].count;
console.log(`${"node sqs-consumer x8 + pg, batch insert".padEnd(44)} ${String(Math.round(count / seconds)).padStart(10)} ` +
            `${((cpu.user + cpu.system) / count).toFixed(1).padStart(14)} ${rows}`);
for (const c of consumers) c.stop();
await pool.end();
process.exit(0);
