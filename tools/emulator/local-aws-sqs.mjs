// Starts local-aws-sqs, a second SQS server independent of fauxqs, on loopback only.
// Usage: node local-aws-sqs.mjs [port]   (port 0 or absent: an ephemeral port)
// Prints "LISTENING <port>" on stdout once ready; exits on SIGTERM/SIGINT or when stdin
// closes, like server.mjs. Its queue URLs carry the account 000000000000, as fauxqs's.
import { createSqsServer } from "local-aws-sqs";

const port = Number(process.argv[2] ?? 0);
const server = await createSqsServer({
  port,
  hostname: "127.0.0.1",
  accountId: "000000000000",
  // The tests delete and recreate queues of one name at once; AWS makes you wait 60 s.
  emulateQueueCreationLifecycle: false,
});
if (!server.listening) await new Promise((resolve) => server.once("listening", resolve));
process.stdout.write(`LISTENING ${server.address().port}\n`);

let closing = false;
const shutdown = () => {
  if (closing) return;
  closing = true;
  server.closeAllConnections?.();
  server.close(() => process.exit(0));
  setTimeout(() => process.exit(0), 1000).unref();
};
process.on("SIGTERM", shutdown);
process.on("SIGINT", shutdown);
process.stdin.on("end", shutdown);
process.stdin.resume();
