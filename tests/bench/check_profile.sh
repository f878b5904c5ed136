#!/usr/bin/env bash
# BENCHMARKS.md's table of CPU per stage is what bench/perf_report.py makes of the
# folded stacks it names (bench/results/<date>/profile/): redrawn from them, the same
# table, and a flame graph drawn for each path.
# Usage: tests/bench/check_profile.sh SOURCE_DIR
set -euo pipefail
cd "$1"
dir="$(grep -o '`bench/results/[^`]*/profile/`' BENCHMARKS.md | head -1 | tr -d '`' |
  sed 's/\/$//' || true)"
if [ -z "$dir" ] || [ ! -d "$dir" ]; then
  echo "check_profile: BENCHMARKS.md names no profile directory that exists ('$dir')" >&2
  exit 1
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp "$dir"/*.folded.gz "$work/"
paths=$(cd "$work" && ls *.folded.gz | sed 's/\.folded\.gz$//' | sort -r | tr '\n' ' ')
events="$(grep -o 'bench/profile.sh [0-9]*' BENCHMARKS.md | head -1 | awk '{print $2}')"
# The committed table's column order: its header.
order="$(grep -m1 '^| stage | ' BENCHMARKS.md | grep -o '[a-z]*: µs/msg' | sed 's/: µs\/msg//' | tr '\n' ' ')"
[ -n "$order" ] || { echo "check_profile: no stage table in BENCHMARKS.md" >&2; exit 1; }
python3 bench/perf_report.py report "$work" "$events" $order >"$work/stages.md"
committed="$(sed -n '/^| stage | /,/^| \*\*all of sluice run\*\*/p' BENCHMARKS.md)"
if ! diff <(echo "$committed") "$work/stages.md"; then
  echo "check_profile: BENCHMARKS.md's stage table differs from what bench/perf_report.py makes of $dir (above: committed <, redrawn >)" >&2
  exit 1
fi
for p in $order; do
  grep -q '<rect' "$work/flame-$p.svg" || { echo "check_profile: no flame graph for $p" >&2; exit 1; }
done
echo "check_profile: the table is $dir's ($paths)"
