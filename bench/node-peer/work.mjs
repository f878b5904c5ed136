// The work every Node peer does, as `sluice run` does it: decode, normalize to the
// identity fields, SHA-256 content hash ("V1:" + hex of the JSON array of the identity
// values), insert-first under a unique index (one multi-row INSERT ... ON CONFLICT DO
// NOTHING per batch).
import { createHash } from "node:crypto";
import pg from "pg";

// A pg pool on DSN ("host=... port=... user=... dbname=...") with TABLE and its index.
export async function openTable(dsn, table, max) {
  const config = Object.fromEntries(dsn.split(" ").map((kv) => kv.split("=")));
  const pool = new pg.Pool({ host: config.host, port: Number(config.port), user: config.user,
                             database: config.dbname, max });
  await pool.query(`CREATE TABLE IF NOT EXISTS "${table}" (hash text NOT NULL, message_id text,
                    document jsonb NOT NULL, written_at timestamptz NOT NULL DEFAULT now())`);
  await pool.query(`CREATE UNIQUE INDEX IF NOT EXISTS "uniq_${table}_hash" ON "${table}" (hash)`);
  return pool;
}

// One message body (text) and its id -> { hash, id, doc }; throws on a malformed one.
export function record(text, id) {
  const body = JSON.parse(text);
  for (const f of ["skuId", "locationId", "eventType", "quantity"])
    if (body[f] === undefined || body[f] === null) throw new Error(`missing ${f}`);
  const quantity = Number.parseInt(body.quantity, 10);
  const doc = { skuId: String(body.skuId), locationId: String(body.locationId),
                eventType: String(body.eventType), quantity, eventId: body.eventId ?? null };
  const hash = "V1:" + createHash("sha256")
      .update(JSON.stringify([doc.skuId, doc.locationId, doc.eventType, doc.quantity])).digest("hex");
  return { hash, id, doc: { ...doc, documentHash: hash } };
}

export async function insertRecords(pool, table, rows) {
  const values = [], params = [];
  // In hash order, as Sluice writes them: concurrent writes then take the unique
  // index's locks in one order and cannot deadlock (unsorted, bench_amqp saw
  // "deadlock detected" on a pool of 4).
  rows = [...rows].sort((a, b) => (a.hash < b.hash ? -1 : a.hash > b.hash ? 1 : 0));
  rows.forEach((r, i) => {
    values.push(`($${3 * i + 1}, $${3 * i + 2}, $${3 * i + 3}::jsonb)`);
    params.push(r.hash, r.id, JSON.stringify(r.doc));
  });
  await pool.query(`INSERT INTO "${table}" (hash, message_id, document) VALUES ${values.join(",")}
                    ON CONFLICT (hash) DO NOTHING`, params);
}
