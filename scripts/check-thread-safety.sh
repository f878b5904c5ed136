#!/usr/bin/env bash
# clang's thread-safety analysis over every source file that sees an annotated mutex
# (common/mutex.hpp, directly or through a header), warnings as errors: a member
# declared SLUICE_GUARDED_BY(m) read or written without `m` held fails. Then proves the
# check can fail: tests/thread_safety/probe.cpp must compile with its mutex held and be
# refused without it. Syntax only (no code is generated): about a minute on two cores.
# Usage: scripts/check-thread-safety.sh
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
command -v clang++ >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang >/dev/null
flags=(-std=c++20 -fsyntax-only -DSLUICE_VERSION=\"thread-safety-check\" -Wthread-safety -Wthread-safety-beta -Werror=thread-safety
       -Werror=thread-safety-beta -DBOOST_ASIO_HAS_CO_AWAIT -DBOOST_ASIO_NO_DEPRECATED
       -DSPDLOG_FMT_EXTERNAL -Iinclude -Isrc -I/usr/include/postgresql
       -I/usr/include/libmongoc-1.0 -I/usr/include/libbson-1.0)

# The files that include common/mutex.hpp, then those that include one of them, to a
# fixed point.
mapfile -t seen < <(grep -rlF '#include "common/mutex.hpp"' src include)
while :; do
  patterns=()
  for f in "${seen[@]}"; do
    case "$f" in
      src/*.hpp) patterns+=(-e "#include \"${f#src/}\"") ;;
      include/*.hpp) patterns+=(-e "#include \"${f#include/}\"") ;;
    esac
  done
  mapfile -t more < <( ((${#patterns[@]})) && grep -rlF "${patterns[@]}" src include | sort -u)
  mapfile -t all < <(printf '%s\n' "${seen[@]}" "${more[@]}" | sort -u)
  ((${#all[@]} == ${#seen[@]})) && break
  seen=("${all[@]}")
done
mapfile -t sources < <(printf '%s\n' "${seen[@]}" | grep '\.cpp$')
echo "thread-safety: ${#sources[@]} files" >&2
printf '%s\n' "${sources[@]}" |
  xargs -P "$(nproc)" -I{} sh -c 'clang++ "$@" {} || { echo "thread-safety: {} failed" >&2; exit 255; }' _ "${flags[@]}"

# The check refuses what it must: an unguarded access fails, the same access under the
# mutex passes.
clang++ "${flags[@]}" tests/thread_safety/probe.cpp
if out=$(clang++ "${flags[@]}" -DSLUICE_PROBE_UNGUARDED tests/thread_safety/probe.cpp 2>&1); then
  echo "thread-safety: an unguarded access compiled: the analysis is not on" >&2
  exit 1
fi
grep -q "requires holding mutex 'mutex_'" <<<"$out" || {
  echo "thread-safety: the unguarded access failed for another reason:" >&2
  echo "$out" >&2
  exit 1
}
echo "thread-safety: ok (an unguarded access is refused)" >&2
