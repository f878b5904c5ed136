#!/usr/bin/env bash
# The suite under load: every test must pass on a busy machine, since CI's and a
# developer's are. Runs scripts/test.sh RUNS times in a row at ctest -j JOBS while
# stress-ng keeps CPUS workers spinning beside it, and prints each run's time.
# Usage: scripts/load-proof.sh [--runs N] [--jobs J] [--cpus C] [--sanitize | --tsan]
# Defaults: 3 runs, -j 4, 2 stress workers (as many as CI's machine has cores).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=3 jobs=4 cpus=2 test_args=()
while (($#)); do
  case "$1" in
    --runs | --jobs | --cpus)
      [[ $# -ge 2 && "$2" =~ ^[1-9][0-9]{0,3}$ ]] ||
        { echo "load-proof: $1 needs a whole number from 1 to 9999, got '${2-}'" >&2; exit 2; }
      declare "${1#--}=$2"
      shift 2 ;;
    --sanitize | --tsan) test_args+=("$1"); shift ;;
    *) echo "load-proof: unknown argument '$1' (see the usage at the top of $0)" >&2; exit 2 ;;
  esac
done
if ! command -v stress-ng >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends stress-ng >/dev/null
fi
# Build before the load starts: the proof is about the tests, not the compiler.
scripts/build.sh "${test_args[@]}" >/dev/null
stress-ng --cpu "$cpus" --quiet &
stress_pid=$!
trap 'kill "$stress_pid" 2>/dev/null; wait "$stress_pid" 2>/dev/null || true' EXIT
failed=0
for ((run = 1; run <= runs; run++)); do
  started=$SECONDS status=0
  SLUICE_TEST_JOBS=$jobs scripts/test.sh "${test_args[@]}" || status=$?
  echo "load-proof: run $run of $runs at -j $jobs beside stress-ng --cpu $cpus: $((SECONDS - started)) s (exit $status)" >&2
  ((status == 0)) || failed=1
done
exit "$failed"
