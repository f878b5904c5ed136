#!/usr/bin/env bash
# The main job, from a fresh Debian 12 machine: installs what is missing, builds,
# starts the local SQS emulator (loopback only), publishes inventory events (with
# business duplicates that are not byte-identical, and a few malformed ones), runs
# the sluice pipeline into SQLite until the queue is drained, prints a summary and
# checks that the database holds exactly the distinct business records.
# Usage: scripts/main-job.sh [--rabbitmq | --sns | --large-payloads | --orders] [EVENTS]
#   (default 20000)
#   --rabbitmq: the same demo through a private RabbitMQ broker instead of SQS.
#   --sns: the events published to an SNS topic that fans out to the queue (enveloped).
#   --large-payloads: 1% of the events padded to 300 kB and sent through S3 as the AWS
#     extended clients do (a pointer in the message), fetched back by the pipeline.
#   --orders: order events in two payload versions, their duplicates written the ways
#     producers differ (offsets, epoch milliseconds, trailing zeros, case), normalized by
#     examples/orders-pipeline.yaml into out/orders.db.
set -euo pipefail
cd "$(dirname "$0")/.."
broker=sqs
mode=plain
case "${1:-}" in
  --rabbitmq) broker=rabbitmq; shift ;;
  --sns) mode=sns; shift ;;
  --large-payloads) mode=large; shift ;;
  --orders) mode=orders; shift ;;
esac
events="${1:-20000}"
scripts/install-deps.sh
dir="$(scripts/build.sh | tail -1)"
sluice="$PWD/$dir/src/sluice"
if [[ "$broker" == sqs ]]; then
  source scripts/lib/emulator.sh
  start_emulator
  endpoint="http://127.0.0.1:$EMULATOR_PORT"
  echo "main-job: SQS emulator on $endpoint"
  # The emulator accepts any signature; these are placeholders, not secrets.
  export AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-local}" AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-local}"
  export AWS_REGION="${AWS_REGION:-us-east-1}"
  export AWS_EC2_METADATA_DISABLED=true  # local job: no instance metadata lookups
else
  source scripts/lib/rabbitmq.sh
  echo "main-job: starting a private RabbitMQ broker (5-10 s)"
  start_rabbitmq
  # The broker's default account, on loopback only: a placeholder, not a secret.
  amqp_url="amqp://guest:guest@127.0.0.1:$RABBITMQ_PORT/%2f"
  echo "main-job: RabbitMQ on 127.0.0.1:$RABBITMQ_PORT"
fi

out="$PWD/out"
mkdir -p "$out"
db="$out/inventory.db"
queue_name=inventory-events
config=examples/inventory-pipeline.yaml
if [[ "$mode" == orders ]]; then
  db="$out/orders.db" queue_name=order-events config=examples/orders-pipeline.yaml
fi
rm -f "$db"*
if [[ "$broker" == sqs ]]; then
  "$sluice" queue create --name "$queue_name" --endpoint-url "$endpoint" >/dev/null
  queue="$endpoint/000000000000/$queue_name"
  if [[ "$mode" == orders ]]; then
    # The tenant travels as a message attribute, written as producers do.
    "$sluice" publish --queue-url "$queue" --endpoint-url "$endpoint" --generate "$events" \
      --events orders --duplicates 0.2 --malformed 0.005 --header "tenant= Acme " 2>&1 |
      tee "$out/publish.log"
  elif [[ "$mode" == sns ]]; then
    # SNS and S3 share the emulator's endpoint; the queue's ARN is read over SQS.
    export AWS_ENDPOINT_URL="$endpoint"
    topic="$("$sluice" topic create --name inventory-topic --subscribe-queue-url "$queue" | head -1)"
    echo "main-job: topic $topic fans out to the queue"
    "$sluice" publish --topic-arn "$topic" --generate "$events" --duplicates 0.2 \
      --malformed 0.005 2>&1 | tee "$out/publish.log"
    config=examples/sns-pipeline.yaml
  elif [[ "$mode" == large ]]; then
    export AWS_ENDPOINT_URL="$endpoint"
    "$sluice" bucket create --name inventory-payloads >/dev/null
    "$sluice" publish --queue-url "$queue" --generate "$events" --duplicates 0.2 \
      --malformed 0.005 --large-share 0.01 --large-bytes 300000 --payload-threshold 262144 \
      --large-payload-bucket inventory-payloads --s3-path-style 2>&1 | tee "$out/publish.log"
    config=examples/large-payloads-pipeline.yaml
  else
    "$sluice" publish --queue-url "$queue" --endpoint-url "$endpoint" --generate "$events" \
      --duplicates 0.2 --malformed 0.005 2>&1 | tee "$out/publish.log"
  fi
else
  "$sluice" queue create --amqp-url "$amqp_url" --name inventory-events >/dev/null
  "$sluice" publish --amqp-url "$amqp_url" --routing-key inventory-events --generate "$events" \
    --duplicates 0.2 --malformed 0.005 2>&1 | tee "$out/publish.log"
fi
distinct="$(sed -n 's/.* \([0-9]*\) distinct business records.*/\1/p' "$out/publish.log")"

if [[ "$broker" == sqs ]]; then
  echo "main-job: running the pipeline ($config) into $db"
  SLUICE_QUEUE_URL="$queue" SLUICE_SQS_ENDPOINT="$endpoint" SLUICE_SQLITE_PATH="$db" \
  SLUICE_S3_ENDPOINT="$endpoint" SLUICE_METRICS_LISTEN=127.0.0.1:0 SLUICE_LOG_LEVEL=error \
    "$sluice" run --config "$config" --until-drained
else
  echo "main-job: running the pipeline (examples/rabbitmq-pipeline.yaml) into $out/inventory.db"
  SLUICE_AMQP_URL="$amqp_url" SLUICE_SQLITE_PATH="$out/inventory.db" \
  SLUICE_METRICS_LISTEN=127.0.0.1:0 SLUICE_LOG_LEVEL=error \
    "$sluice" run --config examples/rabbitmq-pipeline.yaml --until-drained
  echo "main-job: the broker's own counts (queue, ready, unacknowledged, consumers):"
  rabbitmq_queues | sed 's/^/  /'
fi

stored="$(sqlite3 "$db" 'select count(*) from records')"
echo
echo "Look at the result:"
echo "  sqlite3 $db 'select document from records limit 3'"
echo "  sqlite3 $db 'select reason, count(*), min(detail) from rejects group by reason'"
if [[ "$mode" == orders ]]; then
  # The tenant attribute (" Acme ") reached every record, trimmed and lower-cased.
  other="$(sqlite3 "$db" "select count(*) from records where json_extract(document, '$.tenant') <> 'acme'")"
  if [[ "$other" != 0 ]]; then
    echo "main-job: FAILED: $other records without the tenant attribute normalized to acme" >&2
    exit 1
  fi
fi
if [[ "$stored" == "$distinct" ]]; then
  echo "main-job: OK: $stored records stored = $distinct distinct business records published"
else
  echo "main-job: FAILED: $stored records stored, expected $distinct" >&2
  exit 1
fi
