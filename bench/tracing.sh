#!/usr/bin/env bash
# What tracing costs, timed from outside: each scenario is one `sluice run
# --until-drained` process draining COUNT distinct records from a fresh SQS queue (the
# local emulator) into SQLite, its wall time and its CPU (user + system, from the
# shell's `times` of the child) measured around the process:
#   off           no tracing
#   sampled-100   every trace recorded, exported to a loopback OTLP receiver
#                 (tools/otel/receiver.mjs: OpenTelemetry's protobuf definitions)
#   sampled-1     1 % of the traces recorded, the same receiver
#   collector-down  100 %, the endpoint a closed port: every span dropped and counted
#   collector-slow  100 %, a receiver answering each export 2 s late
# Scenarios alternate within each round; a first, untimed round warms up. Prints one
# line per run and the medians with their range: seconds, msg/s against `off` in the
# same round, µs of CPU per message, and the drain rate: records over the time from the
# first row written to the last (the table's own written_at), which leaves out the
# start-up, the drained check and the stop (where a slow collector is given its second).
# Usage: bench/tracing.sh [--count N] [--repeat N]     (30000, 3)
set -euo pipefail
cd "$(dirname "$0")/.."
count=30000
repeat=3
while [ $# -gt 0 ]; do
  case "$1" in
    --count) count="$2"; shift 2 ;;
    --repeat) repeat="$2"; shift 2 ;;
    *) echo "usage: bench/tracing.sh [--count N] [--repeat N]" >&2; exit 2 ;;
  esac
done
for value in "$count" "$repeat"; do
  case "$value" in ''|*[!0-9]*|0) echo "tracing: expected positive whole numbers, got '$value'" >&2; exit 2 ;; esac
done

export AWS_EC2_METADATA_DISABLED=true
export AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local AWS_REGION=us-east-1  # placeholders
dir="$(scripts/build.sh | tail -1)"
sluice="$PWD/$dir/src/sluice"
node="$PWD/tools/emulator/node_modules/.bin/node"
source scripts/lib/emulator.sh
start_emulator
endpoint="http://127.0.0.1:$EMULATOR_PORT"
work="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$work"
  stop_emulator
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
start_receiver() {  # PORT [--delay-ms N]
  local port="$1"; shift
  "$node" tools/otel/receiver.mjs "$work/spans-$port.jsonl" --port "$port" "$@" >/dev/null 2>&1 &
  pids+=($!)
  for _ in $(seq 1 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "tracing: the receiver on $port did not start" >&2
  exit 1
}
fast_port="$(free_port)"; start_receiver "$fast_port"
slow_port="$(free_port)"; start_receiver "$slow_port" --delay-ms 2000
closed_port="$(free_port)"

python3 - "$count" >"$work/records.jsonl" <<'EOF'
import json, sys
for i in range(int(sys.argv[1])):
    print(json.dumps({"id": f"r{i}", "amount": i, "note": "x" * 200}))
EOF

tracing_yaml() {
  case "$1" in
    off) echo "" ;;
    sampled-100) printf 'tracing:\n  otlp_endpoint: http://127.0.0.1:%s\n' "$fast_port" ;;
    sampled-1) printf 'tracing:\n  otlp_endpoint: http://127.0.0.1:%s\n  sampling_ratio: 0.01\n' "$fast_port" ;;
    collector-down) printf 'tracing:\n  otlp_endpoint: http://127.0.0.1:%s\n' "$closed_port" ;;
    collector-slow) printf 'tracing:\n  otlp_endpoint: http://127.0.0.1:%s\n' "$slow_port" ;;
  esac
}

# One run: prints "SECONDS CPU_SECONDS DRAIN_RATE SPANS_LINE".
run_one() {
  local scenario="$1" n="$2" queue url
  queue="tr-$scenario-$n-$RANDOM"
  url="$("$sluice" queue create --name "$queue" --endpoint-url "$endpoint" 2>/dev/null | tail -1)"
  "$sluice" publish --queue-url "$url" --endpoint-url "$endpoint" --file "$work/records.jsonl" \
    --concurrency 8 >/dev/null 2>&1
  rm -f "$work/out.db"
  cat >"$work/pipeline.yaml" <<EOF
source:
  type: sqs
  max_in_flight: 1000
  concurrency: 8
  sqs:
    queue_url: $url
    endpoint_url: $endpoint
    poll_wait: 1s
normalize:
  fields:
    - {name: id, from: /id, required: true}
    - {name: amount, from: /amount, type: integer}
    - {name: note, from: /note}
    - {name: traceId, meta: trace_id}
identity:
  version: V1
  versions:
    V1: [id]
sink:
  type: sqlite
  sqlite:
    path: $work/out.db
metrics:
  listen: ""
logging:
  level: warn
$(tracing_yaml "$scenario")
EOF
  local start end
  start="$(date +%s.%N)"
  # The child's CPU: what `times` says of this subshell's children once it ended.
  ( "$sluice" run --config "$work/pipeline.yaml" --until-drained >"$work/out.txt" 2>&1
    times >"$work/times.txt" )
  end="$(date +%s.%N)"
  local stored
  stored="$(grep -o 'records in sink *[0-9]*' "$work/out.txt" | grep -o '[0-9]*$')"
  if [ "$stored" != "$count" ]; then
    echo "tracing: $scenario stored ${stored:-?} of $count" >&2
    cat "$work/out.txt" >&2
    exit 1
  fi
  local rate
  rate="$(python3 - "$work/out.db" <<'PY'
import datetime, sqlite3, sys
first, last, n = sqlite3.connect(sys.argv[1]).execute(
    "SELECT min(written_at), max(written_at), count(*) FROM records").fetchone()
at = lambda t: datetime.datetime.strptime(t, "%Y-%m-%dT%H:%M:%S.%fZ")
print(f"{n / max((at(last) - at(first)).total_seconds(), 0.001):.0f}")
PY
)"
  local spans
  spans="$(grep '^  traces ' "$work/out.txt" | sed 's/^  traces *//; s/ *(.*//' || true)"
  local cpu
  cpu="$(sed -n 2p "$work/times.txt" | awk '{
    total = 0
    for (i = 1; i <= 2; i++) { split($i, p, "m"); sub("s", "", p[2]); total += p[1] * 60 + p[2] }
    printf "%.3f", total }')"
  echo "$(python3 -c "print(f'{$end - $start:.3f}')") $cpu $rate ${spans:-no tracing}"
}

scenarios=(off sampled-100 sampled-1 collector-down collector-slow)
echo "tracing bench: $count records per run, SQS (emulator) into SQLite, $repeat rounds"
echo "warm-up: $(run_one off 0)"
results="$work/results.txt"
: >"$results"
for round in $(seq 1 "$repeat"); do
  for scenario in "${scenarios[@]}"; do
    line="$(run_one "$scenario" "$round")"
    echo "round $round $scenario: $line"
    echo "$round $scenario $line" >>"$results"
  done
done
python3 - "$results" "$count" <<'EOF'
import statistics, sys
rows = [l.split(None, 5) for l in open(sys.argv[1])]
count = int(sys.argv[2])
by = {}
for r, scenario, seconds, cpu, rate, *_ in rows:
    by.setdefault(scenario, []).append((int(r), float(seconds), float(cpu), float(rate)))
off = {r: (s, d) for r, s, _, d in by["off"]}
print(f"\n{'scenario':<16}{'seconds':>22}{'msg/s':>10}{'vs off':>20}{'us CPU/msg':>22}"
      f"{'drain msg/s':>26}{'drain vs off':>20}")
for scenario, runs in by.items():
    secs = [s for _, s, _, _ in runs]
    ratios = [off[r][0] / s for r, s, _, _ in runs]
    cpus = [c / count * 1e6 for _, _, c, _ in runs]
    rates = [d for _, _, _, d in runs]
    drain_ratios = [d / off[r][1] for r, _, _, d in runs]
    fmt = lambda v, d: f"{statistics.median(v):.{d}f} ({min(v):.{d}f}-{max(v):.{d}f})"
    print(f"{scenario:<16}{fmt(secs, 2):>22}{count / statistics.median(secs):>10.0f}"
          f"{fmt(ratios, 2):>20}{fmt(cpus, 1):>22}{fmt(rates, 0):>26}{fmt(drain_ratios, 2):>20}")
EOF
