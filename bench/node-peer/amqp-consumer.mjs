// The Node peer of bench_amqp: the same work as `sluice run` on RabbitMQ (decode,
// normalize, SHA-256 content hash, insert-first into PostgreSQL under a unique
// index), written the way a Node team would with amqplib: one channel, prefetch
// 250, messages gathered into one multi-row INSERT ... ON CONFLICT DO NOTHING (at
// 100 messages or after 10 ms; up to 4 writes at once on a pool of 4), each message
// acked once its write is done (Node's best case; per-message inserts are slower).
// Runs until SIGTERM; the harness
// times it from outside.
// Usage: node amqp-consumer.mjs AMQP_URL QUEUE DSN TABLE
import amqp from "amqplib";
import { insertRecords, openTable, record } from "./work.mjs";

const [url, queue, dsn, table] = process.argv.slice(2);
const pool = await openTable(dsn, table, 4);
const normalize = (message) =>
  record(message.content.toString("utf8"), message.properties.messageId ?? null);

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
    await insertRecords(pool, table, messages.map(normalize));
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
