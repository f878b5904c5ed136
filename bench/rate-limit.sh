#!/usr/bin/env bash
# source.max_messages_per_second held from outside: a deep SQS queue (the local
# emulator), `sluice run` limited to RATE messages a second, its
# sluice_messages_received_total scraped every second for SECONDS after a warm-up.
# Prints per run the rate over the window, its deviation from RATE, and the largest
# count in any one-second window (the bucket allows RATE + one receive of 10).
# Usage: bench/rate-limit.sh [--rate R] [--seconds S] [--repeat N]   (200, 30, 3)
set -euo pipefail
cd "$(dirname "$0")/.."
rate=200
seconds=30
repeat=3
while [ $# -gt 0 ]; do
  case "$1" in
    --rate) rate="$2"; shift 2 ;;
    --seconds) seconds="$2"; shift 2 ;;
    --repeat) repeat="$2"; shift 2 ;;
    *) echo "usage: bench/rate-limit.sh [--rate R] [--seconds S] [--repeat N]" >&2; exit 2 ;;
  esac
done
for value in "$rate" "$seconds" "$repeat"; do
  case "$value" in ''|*[!0-9]*|0) echo "rate-limit: expected positive whole numbers, got '$value'" >&2; exit 2 ;; esac
done

export AWS_EC2_METADATA_DISABLED=true
export AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local AWS_REGION=us-east-1  # placeholders
dir="$(scripts/build.sh | tail -1)"
sluice="$PWD/$dir/src/sluice"
source scripts/lib/emulator.sh
start_emulator
endpoint="http://127.0.0.1:$EMULATOR_PORT"
work="$(mktemp -d)"
pid=""
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
  rm -rf "$work"
  stop_emulator
}
trap cleanup EXIT

for run in $(seq 1 "$repeat"); do
  queue="$("$sluice" queue create --name "rate-limit-$run" --endpoint-url "$endpoint" | tail -1)"
  # Enough for the warm-up and the window, with a fifth to spare: the queue never runs dry.
  events=$(( rate * (seconds + 5) * 6 / 5 ))
  "$sluice" publish --queue-url "$queue" --endpoint-url "$endpoint" --generate "$events" \
    --duplicates 0 >/dev/null
  port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
  # The main job's pipeline (examples/inventory-pipeline.yaml), its keys from the
  # environment.
  SLUICE_QUEUE_URL="$queue" SLUICE_SQS_ENDPOINT="$endpoint" SLUICE_SQLITE_PATH="$work/rate-$run.db" \
  SLUICE_METRICS_LISTEN="127.0.0.1:$port" SLUICE_LOG_LEVEL=error \
  SLUICE_MAX_MESSAGES_PER_SECOND="$rate" \
    "$sluice" run --config examples/inventory-pipeline.yaml >/dev/null 2>&1 &
  pid=$!
  python3 - "$port" "$seconds" "$rate" "$run" <<'PY'
import sys, time, urllib.request
port, seconds, rate, run = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
def received():
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith("sluice_messages_received_total"))
for _ in range(200):  # the metrics server is up once the queue was checked
    try:
        received(); break
    except OSError:
        time.sleep(0.1)
time.sleep(3)  # warm-up: the first receives spend the bucket's initial burst
samples = []
start = time.monotonic()
while True:
    samples.append((time.monotonic(), received()))
    if samples[-1][0] - start >= seconds: break
    time.sleep(max(0.0, start + len(samples) - time.monotonic()))
(t0, c0), (t1, c1) = samples[0], samples[-1]
measured = (c1 - c0) / (t1 - t0)
worst = max(b[1] - a[1] for a, b in zip(samples, samples[1:]))
print(f"run {run}: configured {rate:g}/s, measured {measured:.1f}/s over {t1 - t0:.1f} s "
      f"({(measured - rate) / rate * 100:+.1f} %), largest one-second count {worst:g}")
PY
  kill -TERM "$pid"
  wait "$pid" || true
  pid=""
done
