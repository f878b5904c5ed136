#!/usr/bin/env bash
# The main job, from a fresh Debian 12 machine: installs what is missing, builds,
# starts the local SQS emulator (loopback only), runs a real round trip through
# Sluice's SQS stack (create queue, publish, drain with overlapping long polls,
# batched deletes, verify) and prints a summary. Stops the emulator on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
dir="$(scripts/build.sh | tail -1)"
source scripts/lib/emulator.sh
start_emulator
echo "main-job: SQS emulator listening on 127.0.0.1:$EMULATOR_PORT"
# The emulator accepts any signature; these are placeholders, not secrets.
export AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-local}" AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-local}"
export AWS_REGION="${AWS_REGION:-us-east-1}"
"$dir/src/sluice" round-trip --endpoint-url "http://127.0.0.1:$EMULATOR_PORT" "$@"
