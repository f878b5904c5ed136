// The Node peer of bench_amqp: the same work as `sluice run` on RabbitMQ (decode,
// normalize, SHA-256 content hash, insert-first into PostgreSQL under a unique
// index), written the way a Node team would with amqplib: one channel, prefetch
// 250, messages gathered into one multi-row INSERT ... ON CONFLICT DO NOTHING (at
// 100 messages or after 10 ms; up to 4 writes at once on a pool of 4), each message
// acked once its write is done (Node's best case; per-message inserts are slower).
// Runs until SIGTERM; the harness
// times it from outside.
// Usage: node amqp-consumer.mjs AMQP_URL QUEUE DSN TABLE
import { createHash } from "node:crypto";
import amqp from "amqplib";
import pg from "pg";

const [url, queue, dsn, table] = process.argv.slice(2);
const config = Object.fromEntries(dsn.split(" ").map((kv) => kv.split("=")));
const pool = new pg.Pool({ host: config.host, port: Number(config.port), user: config.user,
                           database: config.dbname, max: 4 });
await pool.query(`CREATE TABLE IF NOT EXISTS "${table}" (hash text NOT NULL, message_id text,
                  document jsonb NOT NULL, written_at timestamptz NOT NULL DEFAULT now())`);
await pool.query(`CREATE UNIQUE INDEX IF NOT EXISTS "uniq_${table}_hash" ON "${table}" (hash)`);

function normalize(message) {
  const body = JSON.parse(message.content.toString("utf8"));
  for (const f of ["skuId", "locationId", "eventType", "quantity"])
    if (body[f] === undefined || body[f] === null) throw new Error(`missing ${f}`);
  const quantity = Number.parseInt(body.quantity, 10);
  const doc = { skuId: String(body.skuId), locationId: String(body.locationId),
                eventType: String(body.eventType), quantity, eventId: body.eventId ?? null };
  const hash = "V1:" + createHash("sha256")
      .update(JSON.stringify([doc.skuId, doc.locationId, doc.eventType, doc.quantity])).digest("hex");
  return { hash, id: message.properties.messageId ?? null, doc: { ...doc, documentHash: hash } };
}

const connection = await amqp.connect(url);
const channel = await connection.createChannel();
await channel.prefetch(250);
let batch = [];
let timer = null;
const writes = new Set();

function flush() {
  if (timer) clearTimeout(timer);
  timer = null;
  if (batch.length === 0) return;
  const messages = batch;
  batch = [];
  const write = (async () => {
    const rows = messages.map(normalize);
    const values = [], params = [];
    rows.forEach((r, i) => {
      values.push(`($${3 * i + 1}, $${3 * i + 2}, $${3 * i + 3}::jsonb)`);
      params.push(r.hash, r.id, JSON.stringify(r.doc));
    });
    await pool.query(`INSERT INTO "${table}" (hash, message_id, document) VALUES ${values.join(",")}
                      ON CONFLICT (hash) DO NOTHING`, params);
    for (const m of messages) channel.ack(m);
  })();
  writes.add(write);
  write.finally(() => writes.delete(write));
}

await channel.consume(queue, (message) => {
  batch.push(message);
  if (batch.length >= 100) flush();
  else if (!timer) timer = setTimeout(flush, 10);
}, { noAck: false });

process.on("SIGTERM", async () => {
  flush();
  await Promise.allSettled([...writes]);
  await channel.close();
  await connection.close();
  await pool.end();
  process.exit(0);
});
