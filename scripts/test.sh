#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12 machine: installs what is missing,
# builds, runs every test (unit and integration against real local servers).
# Usage: scripts/test.sh [--sanitize | --tsan]
#   SLUICE_TEST_JOBS=N: ctest's parallelism. Default: twice the cores (the tests wait on
#               servers more than they compute, and none needs a quiet machine: the
#               suite and its ASan build pass at -j4 beside stress-ng --cpu 2,
#               scripts/load-proof.sh); the cores for ThreadSanitizer (its 5-15x slowdown)
#   --sanitize: the ASan/UBSan build of the suite: everything that parses or owns
#               buffers, which is every test of ours (the simulation with fewer seeds)
#   --tsan:     the ThreadSanitizer build: everything that runs threads of ours, so not
#               the benchmark report, install and deployment checks nor the one-thread
#               simulation (TSAN_EXCLUDE below); any data race fails it
# Every test runs somewhere in CI (.ci/run runs all three).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
dir="$(scripts/build.sh "$@" | tail -1)"
# Tests talk to loopback servers only: never to a real instance metadata service.
export AWS_EC2_METADATA_DISABLED=true
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# Suppressions name third-party code only, each with its reason (tests/tsan.supp).
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:history_size=4:suppressions=$PWD/tests/tsan.supp"
filter=()
if [[ " $* " == *" --tsan "* ]]; then
  # Everything that runs threads of ours; not the checks of committed files, nor the
  # deployment checks (they read the release binary's libraries: libtsan is not one),
  # nor the simulation (the core on one thread, by construction).
  filter=(-E "${TSAN_EXCLUDE:-^(bench|install|sim)\.|^integration\.Deploy$}")
fi
jobs=$((2 * $(nproc)))
[[ " $* " == *" --tsan "* ]] && jobs=$(nproc)
status=0
ctest --test-dir "$dir" --output-on-failure -j "${SLUICE_TEST_JOBS:-$jobs}" --timeout 900 "${filter[@]}" || status=$?
# A CI log may keep only its head and tail: the reasons go last.
if ((status != 0)); then scripts/lib/failure-summary.sh "$dir"; fi
exit "$status"
