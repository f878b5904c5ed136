#!/usr/bin/env bash
# The benchmarks' bare clients link the same malloc as the sluice binary they are the
# ceilings of: each binary given lists libjemalloc among its NEEDED libraries exactly
# when the first (sluice) does.
# Usage: tests/bench/check_allocator.sh SLUICE BARE_CLIENT...
set -euo pipefail
uses_jemalloc() { readelf -d "$1" | grep -q 'NEEDED.*\[libjemalloc'; }
expected=no
uses_jemalloc "$1" && expected=yes
for binary in "${@:2}"; do
  actual=no
  uses_jemalloc "$binary" && actual=yes
  if [ "$actual" != "$expected" ]; then
    echo "check_allocator: $binary links jemalloc: $actual; $1: $expected" >&2
    exit 1
  fi
done
echo "check_allocator: all on jemalloc: $expected"
