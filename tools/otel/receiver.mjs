// A loopback OTLP/HTTP trace receiver for Sluice's tests: decodes each export with
// OpenTelemetry's own protobuf definitions (the generated code of
// @opentelemetry/otlp-transformer 0.52.1, installed as "otlp-proto") and appends every
// span as one JSON line to OUT. Ids are lowercase hex, attributes a flat object.
//   node receiver.mjs OUT [--port N] [--delay-ms N] [--status N]
// Prints "listening PORT" once ready. --delay-ms answers each request that late (a slow
// collector); --status answers with that status and keeps nothing (a failing one).
import { createServer } from "node:http";
import { appendFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const root = require("otlp-proto/build/src/generated/root.js");
const v1 = root.opentelemetry.proto.collector.trace.v1;

const args = process.argv.slice(2);
const out = args[0];
const option = (name, fallback) => {
  const i = args.indexOf(name);
  return i >= 0 ? Number(args[i + 1]) : fallback;
};
const port = option("--port", 0);
const delayMs = option("--delay-ms", 0);
const status = option("--status", 200);
writeFileSync(out, "");

const hex = (bytes) => Buffer.from(bytes ?? []).toString("hex");
const value = (v) => {
  if (!v) return null;
  if (v.stringValue !== undefined && v.stringValue !== null && v.value === "stringValue") return v.stringValue;
  if (v.value === "intValue") return Number(v.intValue.toString());
  if (v.value === "doubleValue") return v.doubleValue;
  if (v.value === "boolValue") return v.boolValue;
  return v[v.value] ?? null;
};
const attributes = (list) => Object.fromEntries((list ?? []).map((kv) => [kv.key, value(kv.value)]));
const kinds = ["unspecified", "internal", "server", "client", "producer", "consumer"];

let requests = 0;
createServer((req, res) => {
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", () => {
    requests++;
    const answer = () => {
      if (req.url !== "/v1/traces" || req.method !== "POST") {
        res.writeHead(404).end();
        return;
      }
      if (status !== 200) {
        res.writeHead(status, { "content-type": "text/plain" }).end("refused by the test\n");
        return;
      }
      let request;
      try {
        request = v1.ExportTraceServiceRequest.decode(Buffer.concat(chunks));
      } catch (e) {
        res.writeHead(400, { "content-type": "text/plain" }).end(String(e));
        return;
      }
      const lines = [];
      for (const rs of request.resourceSpans) {
        const resource = attributes(rs.resource?.attributes);
        for (const ss of rs.scopeSpans)
          for (const s of ss.spans)
            lines.push(JSON.stringify({
              service: resource["service.name"],
              resource,
              scope: ss.scope?.name ?? "",
              content_type: req.headers["content-type"],
              trace_id: hex(s.traceId),
              span_id: hex(s.spanId),
              parent_span_id: hex(s.parentSpanId),
              trace_state: s.traceState ?? "",
              flags: s.flags ?? 0,
              name: s.name,
              kind: kinds[s.kind] ?? String(s.kind),
              start_ns: s.startTimeUnixNano?.toString(),
              end_ns: s.endTimeUnixNano?.toString(),
              attributes: attributes(s.attributes),
              links: (s.links ?? []).map((l) => ({
                trace_id: hex(l.traceId), span_id: hex(l.spanId), attributes: attributes(l.attributes),
              })),
              status: { code: s.status?.code ?? 0, message: s.status?.message ?? "" },
            }));
      }
      if (lines.length) appendFileSync(out, lines.join("\n") + "\n");
      const body = v1.ExportTraceServiceResponse.encode({}).finish();
      res.writeHead(200, { "content-type": "application/x-protobuf" }).end(Buffer.from(body));
    };
    if (delayMs > 0) setTimeout(answer, delayMs);
    else answer();
  });
}).listen(port, "127.0.0.1", function () {
  console.log(`listening ${this.address().port}`);
});
process.on("SIGTERM", () => process.exit(0));
