#!/usr/bin/env bash
# PostgreSQL's CPU per record with two builds of sluice, timed from outside, alternated.
#
# Usage: bench/postgres-ab.sh OLD_SLUICE NEW_SLUICE [--count N] [--repeat R]
#   (defaults 30000 and 3). Build OLD_SLUICE from an earlier revision, e.g.
#     git show REV:src/sinks/postgres_sink.cpp > src/sinks/postgres_sink.cpp
#     cmake --build build --target sluice && cp build/src/sluice /tmp/sluice-old
#     git checkout src/sinks/postgres_sink.cpp && cmake --build build --target sluice
#
# One private PostgreSQL 15 (fsync off, loopback) and the local SQS emulator for the
# whole run. Each round publishes COUNT inventory events (20 % business duplicates) to a
# fresh queue per binary and drains it with `sluice run --until-drained` into a fresh
# table (batch 100 x 4 writers, 8 receives). PostgreSQL's CPU is its postmaster's and
# its backends' (/proc: utime + stime, and what they reaped), from just before the run
# to its end, start-up DDL and the run summary's count included.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { echo "usage: bench/postgres-ab.sh OLD_SLUICE NEW_SLUICE [--count N] [--repeat R]" >&2; exit 2; }
old="$1" new="$2"
shift 2
count=30000 repeat=3
while [ $# -gt 0 ]; do
  case "$1" in
    --count) count="$2"; shift 2 ;;
    --repeat) repeat="$2"; shift 2 ;;
    *) echo "postgres-ab: unknown option $1" >&2; exit 2 ;;
  esac
done
for n in "$count" "$repeat"; do
  case "$n" in ''|*[!0-9]*|0) echo "postgres-ab: --count and --repeat expect positive numbers, got '$n'" >&2; exit 2 ;; esac
done
for bin in "$old" "$new"; do [ -x "$bin" ] || { echo "postgres-ab: $bin is not an executable" >&2; exit 2; }; done

source scripts/lib/emulator.sh
start_emulator
endpoint="http://127.0.0.1:$EMULATOR_PORT"
# The emulator accepts any signature: placeholders, not secrets.
export AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local AWS_REGION=us-east-1 AWS_EC2_METADATA_DISABLED=true

source scripts/lib/postgres.sh
start_postgres
pg_pid="$PG_PID" pg_dir="$PG_DIR" pg_port="$PG_PORT" dsn="$PG_DSN"
trap 'stop_postgres; stop_emulator' EXIT

# Clock ticks of the postmaster and its children, their reaped children included.
pg_ticks() {
  local total=0 p
  for p in "$pg_pid" $(pgrep -P "$pg_pid"); do
    total=$((total + $(awk '{print $14 + $15 + $16 + $17}' "/proc/$p/stat" 2>/dev/null || echo 0)))
  done
  echo "$total"
}
hz="$(getconf CLK_TCK)"

echo "postgres-ab: $count events per run, $repeat rounds; old=$old new=$new"
printf '%-5s %-4s %8s %8s %14s %12s %10s\n' round bin seconds rows "pg CPU s" "µs/record" "rows/batch"
for round in $(seq 1 "$repeat"); do
  for which in old new; do
    bin="$old"; [ "$which" = new ] && bin="$new"
    queue="ab-$round-$which" table="ab_${round}_$which"
    "$bin" queue create --name "$queue" --endpoint-url "$endpoint" >/dev/null
    "$bin" publish --queue-url "$endpoint/000000000000/$queue" --endpoint-url "$endpoint" \
      --generate "$count" --duplicates 0.2 >/dev/null 2>&1
    config="$pg_dir/$queue.yaml"
    {
      printf 'source:\n  sqs:\n    queue_url: %s\n    endpoint_url: %s\n    region: us-east-1\n    poll_wait: 1s\n  concurrency: 8\n  max_in_flight: 1000\n' \
        "$endpoint/000000000000/$queue" "$endpoint"
      sed -n '/^decode:/,/^sink:/p' examples/inventory-pipeline.yaml | sed '$d'
      printf 'sink:\n  type: postgres\n  table: %s\n  batch_size: 100\n  writers: 4\n  postgres:\n    dsn: %s\nmetrics:\n  listen: ""\nlogging:\n  level: warn\n' \
        "$table" "$dsn"
    } >"$config"
    before="$(pg_ticks)"
    start="$(date +%s.%N)"
    "$bin" run --until-drained --config "$config" >"$pg_dir/$queue.out" 2>&1
    end="$(date +%s.%N)"
    ticks=$(( $(pg_ticks) - before ))
    rows="$(psql -X -A -t -h 127.0.0.1 -p "$pg_port" -U postgres -c "SELECT count(*) FROM $table")"
    per_batch="$(sed -n 's/.*sink writes *\([0-9.]*\) records per batch.*/\1/p' "$pg_dir/$queue.out")"
    awk -v r="$round" -v w="$which" -v s="$start" -v e="$end" -v rows="$rows" -v t="$ticks" \
      -v hz="$hz" -v pb="$per_batch" 'BEGIN { printf "%-5s %-4s %8.2f %8d %14.2f %12.1f %10s\n",
        r, w, e - s, rows, t / hz, t / hz * 1e6 / rows, pb }'
    echo "DATA postgres-ab round=$round bin=$which rows=$rows pg_cpu_s=$(awk -v t="$ticks" -v hz="$hz" 'BEGIN{print t/hz}')"
  done
done
