// A traced SQS producer, as a Node service would be: OpenTelemetry's JS SDK with its
// AWS SDK instrumentation (which injects each message's context as a `traceparent`
// message attribute) and an OTLP/HTTP protobuf exporter.
//   node producer.mjs QUEUE_URL COUNT OTLP_BASE_URL [SQS_ENDPOINT]
// Sends COUNT messages in batches of 10, each batch inside a span "produce", flushes
// the spans and prints "sent COUNT".
import { context, trace } from "@opentelemetry/api";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-proto";
import { registerInstrumentations } from "@opentelemetry/instrumentation";
import { AwsInstrumentation } from "@opentelemetry/instrumentation-aws-sdk";
import { resourceFromAttributes } from "@opentelemetry/resources";
import { BatchSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { NodeTracerProvider } from "@opentelemetry/sdk-trace-node";
import { createRequire } from "node:module";

const [queueUrl, countText, otlp, endpoint] = process.argv.slice(2);
const provider = new NodeTracerProvider({
  resource: resourceFromAttributes({ "service.name": "node-producer" }),
  spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter({ url: `${otlp}/v1/traces` }))],
});
provider.register();
registerInstrumentations({ instrumentations: [new AwsInstrumentation()] });

// Loaded after the instrumentation is registered, so that it is patched.
const require = createRequire(import.meta.url);
const { SQSClient, SendMessageBatchCommand } = require("@aws-sdk/client-sqs");
const sqs = new SQSClient({
  region: process.env.AWS_REGION ?? "us-east-1",
  endpoint: endpoint ?? process.env.AWS_ENDPOINT_URL,
  credentials: { accessKeyId: "test", secretAccessKey: "test" },
});
const tracer = trace.getTracer("producer");
const count = Number(countText);
for (let i = 0; i < count; i += 10) {
  const span = tracer.startSpan("produce");
  await context.with(trace.setSpan(context.active(), span), async () => {
    const entries = [];
    for (let j = i; j < Math.min(count, i + 10); j++)
      entries.push({ Id: `m${j}`, MessageBody: JSON.stringify({ id: `order-${j}`, amount: j }) });
    const answer = await sqs.send(new SendMessageBatchCommand({ QueueUrl: queueUrl, Entries: entries }));
    if (answer.Failed?.length) throw new Error(JSON.stringify(answer.Failed));
  });
  span.end();
}
await provider.forceFlush();
await provider.shutdown();
console.log(`sent ${count}`);
