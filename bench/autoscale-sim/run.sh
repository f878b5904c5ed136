#!/usr/bin/env bash
# Seed 004's scenario scaled in time (÷100) on this machine: a FIFO queue of the local
# emulator with 10 message groups, 100 ms of work per message (the seed's 10 s), and
# `sluice run` tasks started and stopped by bench/autoscale-sim/supervisor.py the way an
# ECS service follows TaskUtilization. Prints one line per scenario and a table; writes
# the timeline of running tasks for the plot.
# Usage: bench/autoscale-sim/run.sh [--groups 10] [--per-group 100] [--work-ms 100]
#                                   [--repeat 1] [--timeline FILE]
set -euo pipefail
cd "$(dirname "$0")/../.."
args=("$@")
export AWS_EC2_METADATA_DISABLED=true
# The emulator accepts any signature: placeholders, not secrets.
export AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local AWS_REGION=us-east-1
dir="$(scripts/build.sh | tail -1)"
source scripts/lib/emulator.sh
start_emulator
endpoint="http://127.0.0.1:$EMULATOR_PORT"

pg_dir="$(mktemp -d /tmp/sluice-autoscale-sim-XXXXXX)"
pg_bin=/usr/lib/postgresql/15/bin
pg_port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
chown postgres "$pg_dir" && chmod 700 "$pg_dir"
runuser -u postgres -- "$pg_bin/initdb" -D "$pg_dir/data" --auth=trust -U postgres -E UTF8 >/dev/null
runuser -u postgres -- "$pg_bin/postgres" -D "$pg_dir/data" -p "$pg_port" -k "$pg_dir" \
  -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200 >"$pg_dir/log" 2>&1 &
pg_pid=$!
cleanup() { kill -INT "$pg_pid" 2>/dev/null; wait "$pg_pid" 2>/dev/null; rm -rf "$pg_dir"; stop_emulator; }
trap cleanup EXIT
for _ in $(seq 1 100); do pg_isready -q -h 127.0.0.1 -p "$pg_port" && break; sleep 0.1; done

python3 bench/autoscale-sim/simulate.py --sluice "$PWD/$dir/src/sluice" --endpoint "$endpoint" \
  --dsn "host=127.0.0.1 port=$pg_port user=postgres dbname=postgres" --work-dir "$pg_dir" \
  "${args[@]}"
