#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12 machine: installs what is missing,
# builds, runs every test (unit and integration against real local servers).
# Usage: scripts/test.sh [--sanitize]   (--sanitize: the ASan/UBSan build)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
dir="$(scripts/build.sh "$@" | tail -1)"
# Tests talk to loopback servers only: never to a real instance metadata service.
export AWS_EC2_METADATA_DISABLED=true
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ctest --test-dir "$dir" --output-on-failure -j "$(nproc)" --timeout 600
