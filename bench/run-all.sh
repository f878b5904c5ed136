#!/usr/bin/env bash
# Every benchmark in one run, each contender timed the same way in the same run, then
# the tables and plots of BENCHMARKS.md's first section regenerated from the outputs.
#
# Usage: bench/run-all.sh [--repeat N] [--quick]
#   --repeat N  drain runs (default 3): every figure is shown per run and as a spread
#   --quick     only the drain runs (no latency sweep, pipeline, micro-benchmarks)
# Needs: scripts/install-deps.sh (emulator, PostgreSQL), gnuplot (Debian gnuplot-nox,
# installed here if missing) and the Node peers (bench/node-peer, npm ci here if missing).
# Raw outputs go to bench/results/<date>/, plots to bench/plots/.
set -euo pipefail
cd "$(dirname "$0")/.."

repeat=3
quick=0
while [ $# -gt 0 ]; do
  case "$1" in
    --repeat) repeat="$2"; shift 2 ;;
    --quick) quick=1; shift ;;
    *) echo "usage: bench/run-all.sh [--repeat N] [--quick]" >&2; exit 2 ;;
  esac
done
case "$repeat" in ''|*[!0-9]*|0) echo "run-all: --repeat expects a positive number, got '$repeat'" >&2; exit 2 ;; esac

if ! command -v gnuplot >/dev/null; then
  echo "run-all: installing gnuplot-nox (the plots)"
  ${SUDO:-$( [ "$(id -u)" = 0 ] || echo sudo )} apt-get install -y -q gnuplot-nox >/dev/null
fi

if [ ! -d bench/node-peer/node_modules ]; then
  echo "run-all: installing the Node peers (npm ci in bench/node-peer)"
  (cd bench/node-peer && npm ci --no-audit --no-fund --loglevel=error)
fi

export AWS_EC2_METADATA_DISABLED=true
scripts/build.sh >/dev/null
out="bench/results/$(date +%F)"
mkdir -p "$out" bench/plots
# Only what this script writes: a --quick run must not report an earlier run's other
# tables, and notes kept beside them (ab-runs.txt, the A/B outputs) must survive.
rm -f "$out"/drain-*.txt "$out"/concurrency.txt "$out"/pipeline.txt "$out"/pipeline-pinned.txt \
  "$out"/micro.txt

for i in $(seq 1 "$repeat"); do
  echo "run-all: drain run $i of $repeat"
  build/bench/bench_drain 40000 8 | tee "$out/drain-$i.txt"
done
if [ "$quick" = 0 ]; then
  echo "run-all: throughput against concurrent receives, 0/20/50 ms injected"
  build/bench/bench_concurrency 6 | tee "$out/concurrency.txt"
  echo "run-all: pipeline into PostgreSQL, every contender timed from outside, with the Node peers"
  build/bench/bench_pipeline 30000 --node --repeat "$repeat" | tee "$out/pipeline.txt"
  echo "run-all: the same, emulator pinned to CPU 0 and everything else to CPU 1"
  build/bench/bench_pipeline 30000 --pin --repeat "$repeat" | tee "$out/pipeline-pinned.txt"
  echo "run-all: micro-benchmarks"
  bench/run-micro.sh | tee "$out/micro.txt"
fi
python3 bench/report.py "$out" BENCHMARKS.md bench/plots
echo "run-all: BENCHMARKS.md and bench/plots/ regenerated from $out"
