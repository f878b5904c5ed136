#!/usr/bin/env bash
# Configures and builds Sluice. Usage: scripts/build.sh [--sanitize | --tsan | --fuzz] [--release]
# Build trees: build/ (default), build-asan/ (--sanitize), build-tsan/ (--tsan),
# build-fuzz/ (--fuzz: the libFuzzer targets, with clang; scripts/fuzz.sh runs them).
# One build of a tree at a time: a second waits for the first (a lock per tree).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=build
args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo)
targets=()
# One tree per call: its kind, or --release alone (the default tree, optimized).
if (($# > 1)); then echo "build.sh: one option at a time, got $*" >&2; exit 2; fi
for arg in "$@"; do
  case "$arg" in
    --sanitize) dir=build-asan; args=(-DCMAKE_BUILD_TYPE=Debug -DSLUICE_SANITIZE=ON -DSLUICE_BUILD_BENCH=OFF) ;;
    # Optimized a little: ThreadSanitizer slows the code 5-15x, and timings matter. -O1,
    # not -O2: the build takes about a quarter less CPU.
    --tsan) dir=build-tsan; args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g -DNDEBUG"
                                  -DSLUICE_TSAN=ON -DSLUICE_BUILD_BENCH=OFF) ;;
    --fuzz)
      command -v clang++ >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang >/dev/null
      dir=build-fuzz
      args=(-DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Debug -DSLUICE_FUZZ=ON -DSLUICE_BUILD_TESTS=OFF
            -DSLUICE_BUILD_BENCH=OFF)
      targets=(--target fuzzers) ;;
    --release) args=(-DCMAKE_BUILD_TYPE=Release) ;;
    *) echo "unknown option $arg" >&2; exit 2 ;;
  esac
done
mkdir -p "$dir"
exec 9>"$dir/.build-lock"
flock 9
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
# A compiler cache for every tree, in its default place under $HOME: it survives from one
# build to the next on a machine and into CI, whose clone lives in another folder. Paths
# are hashed relative to the checkout (base directory) and the build's own directory is
# left out of the hash, so such a clone still hits. The precompiled headers are hashed by
# content (-fpch-preprocess and the sloppiness ccache's manual asks for them).
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1 CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-25G}"
  export CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
  args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B "$dir" "${generator[@]}" "${args[@]}" >/dev/null
# The build's own output to stderr (errors stay visible); the tree's name on stdout.
cmake --build "$dir" -j "$(nproc)" "${targets[@]}" >&2
echo "$dir"
