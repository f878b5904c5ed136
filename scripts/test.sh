#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12 machine: installs what is missing,
# builds, runs every test (unit and integration against real local servers).
# Usage: scripts/test.sh [--sanitize | --tsan]
#   --sanitize: the ASan/UBSan build of the whole suite
#   --tsan:     the ThreadSanitizer build; the suite but the benchmark report and
#               install checks (see TSAN_EXCLUDE below); any data race fails it
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
  # deployment checks (they read the release binary's libraries: libtsan is not one).
  filter=(-E "${TSAN_EXCLUDE:-^(bench|install)\.|^integration\.Deploy$}")
fi
status=0
ctest --test-dir "$dir" --output-on-failure -j "$(nproc)" --timeout 900 "${filter[@]}" || status=$?
# A CI log may keep only its head and tail: the reasons go last.
if ((status != 0)); then scripts/lib/failure-summary.sh "$dir"; fi
exit "$status"
