// Starts CongoDB (a MongoDB-wire-protocol server in TypeScript) on loopback.
// Usage: node server.mjs [port]   Prints "LISTENING <port>" when ready; exits on
// SIGTERM/SIGINT or when its stdin closes. It does not enforce unique secondary
// indexes: tests that need MongoDB's own index behaviour cannot be proven here.
import net from "node:net";
import { CongoServer } from "./vendor/package/dist_ts/congodb/index.js";

async function freePort() {
  return new Promise((resolve) => {
    const probe = net.createServer();
    probe.listen(0, "127.0.0.1", () => {
      const { port } = probe.address();
      probe.close(() => resolve(port));
    });
  });
}

const requested = Number(process.argv[2] ?? 0);
const port = requested || (await freePort());
const server = new CongoServer({ port, host: "127.0.0.1" });
await server.start();
process.stdout.write(`LISTENING ${port}\n`);

let closing = false;
const shutdown = async () => {
  if (closing) return;
  closing = true;
  try { await server.stop(); } catch {}
  process.exit(0);
};
process.on("SIGTERM", shutdown);
process.on("SIGINT", shutdown);
process.stdin.on("end", shutdown);
process.stdin.resume();
