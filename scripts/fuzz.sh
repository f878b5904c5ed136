#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) and runs each for a while,
# starting from the seed corpora in fuzz/corpus/. Usage: scripts/fuzz.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
scripts/install-deps.sh
command -v clang++ >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang >/dev/null
cmake -S . -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Debug \
  -DSLUICE_FUZZ=ON -DSLUICE_BUILD_TESTS=OFF -DSLUICE_BUILD_BENCH=OFF >/dev/null
cmake --build build-fuzz --target fuzz_receive_response fuzz_http_url fuzz_config
for target in receive_response http_url config; do
  work="$(mktemp -d)"
  cp fuzz/corpus/"$target"/* "$work"/
  echo "fuzz: $target for ${seconds}s"
  build-fuzz/fuzz/fuzz_"$target" -max_total_time="$seconds" -rss_limit_mb=2048 "$work" 2>&1 | tail -1
  rm -rf "$work"
done
