#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) and runs each for a while,
# starting from the seed corpora in fuzz/corpus/; exits non-zero on any finding.
# Usage: scripts/fuzz.sh [SECONDS]   (CI runs it briefly: .ci/run)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
scripts/install-deps.sh
command -v clang++ >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang >/dev/null
cmake -S . -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Debug \
  -DSLUICE_FUZZ=ON -DSLUICE_BUILD_TESTS=OFF -DSLUICE_BUILD_BENCH=OFF >/dev/null
cmake --build build-fuzz --target fuzz_receive_response fuzz_http_url fuzz_config fuzz_transform \
  fuzz_amqp_uri fuzz_s3_answers fuzz_plan_metrics fuzz_checkpoint fuzz_trace_context
for target in receive_response http_url config transform amqp_uri s3_answers plan_metrics \
  checkpoint trace_context; do
  work="$(mktemp -d)"
  cp fuzz/corpus/"$target"/* "$work"/
  echo "fuzz: $target for ${seconds}s"
  # A crash, a sanitizer finding (UBSan is fatal in this build) or a leak fails the run.
  if ! build-fuzz/fuzz/fuzz_"$target" -max_total_time="$seconds" -rss_limit_mb=2048 "$work" \
      >"$work.log" 2>&1; then
    tail -40 "$work.log"
    echo "fuzz: $target FAILED" >&2
    exit 1
  fi
  tail -1 "$work.log"
  rm -f "$work.log"
  rm -rf "$work"
done
