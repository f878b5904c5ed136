#!/usr/bin/env bash
# Micro-benchmarks, side by side with their peers, in one run.
# Usage: bench/run-micro.sh   (builds a Release tree in build-release/)
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-release -G Ninja -DCMAKE_BUILD_TYPE=Release -DSLUICE_BUILD_TESTS=OFF >/dev/null
cmake --build build-release --target bench_micro bench_normalize >/dev/null
response="$(mktemp)"
trap 'rm -f "$response"' EXIT
BENCH_DUMP_RESPONSE="$response" build-release/bench/bench_micro --benchmark_repetitions=3 \
  --benchmark_report_aggregates_only=true --benchmark_min_time=0.5
build-release/bench/bench_normalize --benchmark_repetitions=3 \
  --benchmark_report_aggregates_only=true --benchmark_min_time=0.5
/usr/bin/python3 bench/botocore_sign_bench.py
if [ -d bench/node-peer/node_modules ]; then
  tools/emulator/node_modules/.bin/node bench/node-peer/micro.mjs "$response"
else
  echo "js_sdk_receive_client_work_us skipped (run: cd bench/node-peer && npm ci)"
fi
