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

source scripts/lib/postgres.sh
start_postgres -c max_connections=200
trap 'stop_postgres; stop_emulator' EXIT

python3 bench/autoscale-sim/simulate.py --sluice "$PWD/$dir/src/sluice" --endpoint "$endpoint" \
  --dsn "$PG_DSN" --work-dir "$PG_DIR" \
  "${args[@]}"
