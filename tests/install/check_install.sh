#!/usr/bin/env bash
# The library as C++ users take it: `cmake --install` into a fresh prefix, then the
# example service in examples/installed built with find_package(Sluice) and
# Sluice::sluice, and run. Usage: check_install.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build_dir=$1
source_dir=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
# Nothing installed may point back into the source or build trees.
if grep -rlF -e "$source_dir" -e "$build_dir" "$work/prefix/lib/cmake"; then
  echo "check_install: the installed package refers to the build machine's trees" >&2
  exit 1
fi
cmake -S "$source_dir/examples/installed" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" \
  -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/build" -j 2 >/dev/null
set +e
"$work/build/inventory_consumer" 2>"$work/stderr"
code=$?
set -e
if [[ $code != 2 ]] || ! grep -q "usage:" "$work/stderr"; then
  echo "check_install: the consumer built against the package did not run (exit $code)" >&2
  cat "$work/stderr" >&2
  exit 1
fi
"$work/prefix/bin/sluice" --help >/dev/null
echo "check_install: find_package(Sluice) and Sluice::sluice work; the consumer links and runs"
