// Starts the fauxqs SQS emulator on loopback only.
// Usage: node server.mjs [port]   (port 0 or absent: an ephemeral port)
// Prints "LISTENING <port>" on stdout once ready; exits on SIGTERM/SIGINT.
import { buildApp } from "fauxqs";

const port = Number(process.argv[2] ?? 0);
const app = buildApp({ logger: false });
await app.listen({ host: "127.0.0.1", port });
const actual = app.server.address().port;
process.stdout.write(`LISTENING ${actual}\n`);

let closing = false;
const shutdown = async () => {
  if (closing) return;
  closing = true;
  await app.close();
  process.exit(0);
};
process.on("SIGTERM", shutdown);
process.on("SIGINT", shutdown);
// If the parent dies and closes our stdin, go away too (no orphaned emulators).
process.stdin.on("end", shutdown);
process.stdin.resume();
