#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) and runs each for a while,
# starting from the seed corpora in fuzz/corpus/; exits non-zero on any finding.
# Usage: scripts/fuzz.sh [SECONDS]   (CI runs it briefly: .ci/run)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
scripts/install-deps.sh
scripts/build.sh --fuzz >/dev/null
# One target from its seed corpus; a crash, a sanitizer finding (UBSan is fatal in this
# build) or a leak fails it.
fuzz_one() {
  local target="$1" work
  work="$(mktemp -d)"
  cp fuzz/corpus/"$target"/* "$work"/
  if ! build-fuzz/fuzz/fuzz_"$target" -max_total_time="$seconds" -rss_limit_mb=2048 "$work" \
      >"$work.log" 2>&1; then
    tail -40 "$work.log"
    echo "fuzz: $target FAILED" >&2
    return 1
  fi
  echo "fuzz: $target for ${seconds}s: $(tail -1 "$work.log")"
  rm -rf "$work.log" "$work"
}
targets=(receive_response http_url config transform amqp_uri s3_answers plan_metrics checkpoint
  trace_context)
# As many at once as there are cores: each target is one process.
jobs="$(nproc)"
for ((i = 0; i < ${#targets[@]}; i += jobs)); do
  pids=()
  for target in "${targets[@]:i:jobs}"; do
    fuzz_one "$target" &
    pids+=($!)
  done
  failed=0
  for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
  ((failed == 0)) || exit 1
done
