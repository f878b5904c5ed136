#!/usr/bin/env bash
# A/B of two `sluice` binaries on the main job's pipeline: 20,000 inventory events (20 %
# business duplicates, 0.5 % malformed, the same seed) into SQLite through one SQS
# emulator, the same config for both, the binaries alternating; each line is the
# summary's own figures (wall time with messages, CPU per message from getrusage).
# Usage: bench/ab-main-job.sh OLD_SLUICE NEW_SLUICE CONFIG [ROUNDS]
#   e.g. git worktree add /tmp/old REV && cmake -S /tmp/old -B /tmp/old/build -G Ninja
#        -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSLUICE_BUILD_TESTS=OFF -DSLUICE_BUILD_BENCH=OFF
#        && ninja -C /tmp/old/build sluice, then
#        bench/ab-main-job.sh /tmp/old/build/src/sluice build/src/sluice \
#          /tmp/old/examples/inventory-pipeline.yaml
# (a config both versions read: an older one, whose keys the newer still accepts).
set -euo pipefail
old="$1" new="$2" cfg="$3" rounds="${4:-3}"
cd "$(dirname "$0")/.."
source scripts/lib/emulator.sh
start_emulator
endpoint="http://127.0.0.1:$EMULATOR_PORT"
export AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local AWS_REGION=us-east-1
export AWS_EC2_METADATA_DISABLED=true
work="$(mktemp -d)"
trap 'rm -rf "$work"; stop_emulator' EXIT
for round in $(seq 1 "$rounds"); do
  for who in old new; do
    bin="${!who}"
    queue="ab-$who-$round"
    "$new" queue create --name "$queue" --endpoint-url "$endpoint" >/dev/null
    "$new" publish --queue-url "$endpoint/000000000000/$queue" --endpoint-url "$endpoint" \
      --generate 20000 --duplicates 0.2 --malformed 0.005 --seed 7 >/dev/null 2>&1
    summary="$(SLUICE_QUEUE_URL="$endpoint/000000000000/$queue" SLUICE_SQS_ENDPOINT="$endpoint" \
      SLUICE_SQLITE_PATH="$work/$who-$round.db" SLUICE_METRICS_LISTEN=127.0.0.1:0 \
      SLUICE_LOG_LEVEL=error "$bin" run --config "$cfg" --until-drained 2>/dev/null)"
    echo "round $round $who: $(grep -E 'records in sink|elapsed' <<<"$summary" | tr -s ' ' | tr '\n' ' ')"
  done
done
