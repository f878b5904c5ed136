#!/usr/bin/env bash
# The seeds' own claims, measured: seed 001's dedupe design (select-then-insert against
# insert-first: batched and one record per statement, on loopback and with 1 ms each way
# in front of PostgreSQL) and seed 004's in-flight scaling (bench/autoscale-sim). Writes
# the raw outputs to bench/results/<date>/ and prints the two tables of BENCHMARKS.md.
#
# Usage: bench/seeds.sh [--repeat N] [--count N]   (defaults 3 and 10000 events)
set -euo pipefail
cd "$(dirname "$0")/.."
repeat=3 count=10000
while [ $# -gt 0 ]; do
  case "$1" in
    --repeat) repeat="${2:-}"; shift $(($# > 1 ? 2 : 1)) ;;
    --count) count="${2:-}"; shift $(($# > 1 ? 2 : 1)) ;;
    *) echo "usage: bench/seeds.sh [--repeat N] [--count N]" >&2; exit 2 ;;
  esac
done
for n in "$repeat" "$count"; do
  if [[ ! "$n" =~ ^[0-9]+$ ]] || ((10#$n == 0)); then
    echo "seeds: --repeat and --count expect positive numbers, got '$n'" >&2
    exit 2
  fi
done
export AWS_EC2_METADATA_DISABLED=true
scripts/build.sh >/dev/null
out="bench/results/$(date +%F)"
mkdir -p "$out" bench/plots
contenders=ceiling-db,ceiling-db-select-first,ceiling-db-per-record,ceiling-db-select-first-per-record
: >"$out/seed-001.txt"
for latency in 0 1; do
  label="direct (loopback)"
  ((latency == 0)) || label="${latency} ms each way"
  echo "seeds: seed 001, $label"
  echo "### $label" >>"$out/seed-001.txt"
  BENCH_DB_LATENCY_MS="$latency" BENCH_ONLY="$contenders" \
    build/bench/bench_pipeline "$count" --repeat "$repeat" | tee -a "$out/seed-001.txt"
done
echo "seeds: seed 004 (bench/autoscale-sim)"
bench/autoscale-sim/run.sh --repeat "$repeat" --timeline bench/plots/autoscale_sim.dat |
  tee "$out/seed-004.txt"
echo
echo "Seed 001 ($out/seed-001.txt):"
python3 bench/dedupe_table.py "$out/seed-001.txt"
echo
echo "Seed 004 ($out/seed-004.txt):"
sed -n '/^| scenario/,$p' "$out/seed-004.txt"
