#!/usr/bin/env bash
# Where `sluice run`'s CPU goes, per stage: perf (cpu-clock, DWARF call stacks) over
# `sluice run --until-drained` of EVENTS generated inventory events into PostgreSQL, for an
# SQS standard queue, an SQS FIFO queue and a RabbitMQ queue; then bench/perf_report.py
# folds the stacks, sorts each sample into a stage (its table: stages.md) and draws a
# flame graph per path (flame-<path>.svg).
#
# Usage: bench/profile.sh [EVENTS] [PATH...]   (default 100000; paths: sqs fifo rabbitmq)
# Needs: scripts/install-deps.sh, and perf (Debian's linux-perf, installed here if
# missing). These machines expose no hardware counters: cpu-clock samples.
# Output: bench/results/<date>/profile/
set -euo pipefail
cd "$(dirname "$0")/.."
events="${1:-100000}"
shift || true
paths=("$@")
((${#paths[@]})) || paths=(sqs fifo rabbitmq)
case "$events" in '' | *[!0-9]* | 0)
  echo "profile: EVENTS expects a positive number, got '$events'" >&2
  exit 2
  ;;
esac
for p in "${paths[@]}"; do
  case "$p" in sqs | fifo | rabbitmq) ;; *)
    echo "profile: PATH expects sqs, fifo or rabbitmq, got '$p'" >&2
    exit 2
    ;;
  esac
done
if ! command -v perf >/dev/null; then
  echo "profile: installing linux-perf"
  ${SUDO:-$([ "$(id -u)" = 0 ] || echo sudo)} apt-get install -y -q linux-perf >/dev/null
fi
export AWS_EC2_METADATA_DISABLED=true AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local \
  AWS_REGION=us-east-1
scripts/build.sh >/dev/null
bin=build/src/sluice
out="bench/results/$(date +%F)/profile"
mkdir -p "$out"

source scripts/lib/emulator.sh
source scripts/lib/postgres.sh
source scripts/lib/rabbitmq.sh
cleanup() {
  stop_emulator
  stop_rabbitmq 2>/dev/null || true
  stop_postgres
}
start_postgres
trap cleanup EXIT
start_emulator
if [[ " ${paths[*]} " == *" rabbitmq "* ]]; then start_rabbitmq; fi
trap cleanup EXIT # each start set a trap of its own: stop all of them
endpoint="http://127.0.0.1:$EMULATOR_PORT"

stages='normalize:
  fields:
    - {name: skuId, from: /skuId, type: string, required: true}
    - {name: locationId, from: /locationId, type: string, required: true}
    - {name: eventType, from: /eventType, type: string, required: true}
    - {name: quantity, from: /quantity, type: integer, required: true}
    - {name: eventId, from: /eventId, type: string}
identity:
  versions:
    V1: [skuId, locationId, eventType, quantity]
metrics:
  listen: ""
logging:
  level: warn'

for path in "${paths[@]}"; do
  table="profile_${path}"
  case "$path" in
    sqs | fifo)
      name="profile-$path-$$"
      fifo=()
      [[ "$path" == fifo ]] && name="$name.fifo" && fifo=(--fifo)
      url="$($bin queue create --name "$name" "${fifo[@]}" --endpoint-url "$endpoint" 2>/dev/null |
        tail -1)"
      $bin publish --queue-url "$url" --endpoint-url "$endpoint" --generate "$events" \
        --concurrency 8 2>&1 | tail -1
      source_yaml="source:
  sqs:
    queue_url: $url
    endpoint_url: $endpoint
    region: us-east-1"
      ;;
    rabbitmq)
      amqp="amqp://guest:guest@127.0.0.1:$RABBITMQ_PORT/%2f"
      $bin queue create --amqp-url "$amqp" --name "$table" >/dev/null 2>&1
      $bin publish --amqp-url "$amqp" --routing-key "$table" --generate "$events" 2>&1 | tail -1
      source_yaml="source:
  type: rabbitmq
  rabbitmq:
    url: $amqp
    queue: $table"
      ;;
  esac
  printf '%s\n%s\nsink:\n  type: postgres\n  table: %s\n  postgres:\n    dsn: "%s"\n' \
    "$source_yaml" "$stages" "$table" "$PG_DSN" >"$out/$path.yaml"
  echo "profile: $path: sluice run under perf, $events events"
  perf record -q -e cpu-clock -F 499 --call-graph dwarf,16384 -o "$out/$path.data" -- \
    $bin run --config "$out/$path.yaml" --until-drained >"$out/$path-run.txt" 2>&1
  grep -E "received|written|elapsed" "$out/$path-run.txt" || true
  # --no-inline: no addr2line per address (it takes minutes); inlined frames are their caller.
  perf script --no-inline -i "$out/$path.data" 2>/dev/null |
    python3 bench/perf_report.py fold >"$out/$path.folded"
  rm -f "$out/$path.data"
done
python3 bench/perf_report.py report "$out" "$events" "${paths[@]}" | tee "$out/stages.md"
# The folded stacks are large (tens of MB): kept compressed, to redraw or regroup.
gzip -f "$out"/*.folded
echo "profile: $out/stages.md, $out/flame-*.svg and the folded stacks ($out/*.folded.gz)"
