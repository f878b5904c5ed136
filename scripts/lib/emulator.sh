# Sourced by scripts: start_emulator sets EMULATOR_PORT and EMULATOR_PID; the
# emulator is stopped on exit. Loopback only, on an ephemeral port.
start_emulator() {
  local root out
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
  out="$(mktemp)"
  # A pipe that stays open for our lifetime keeps the emulator's stdin open; when
  # this shell dies the pipe closes and the emulator exits by itself.
  exec {EMULATOR_FD}> >("$root/tools/emulator/node_modules/.bin/node" --no-warnings \
      "$root/tools/emulator/server.mjs" 0 >"$out" 2>&1)
  EMULATOR_PID=$!
  for _ in $(seq 1 100); do
    if grep -q '^LISTENING ' "$out"; then
      EMULATOR_PORT="$(awk '/^LISTENING/ {print $2; exit}' "$out")"
      rm -f "$out"
      trap stop_emulator EXIT
      return 0
    fi
    sleep 0.1
  done
  echo "the SQS emulator did not start:" >&2
  cat "$out" >&2
  return 1
}

stop_emulator() {
  if [[ -n "${EMULATOR_FD:-}" ]]; then
    exec {EMULATOR_FD}>&-
    unset EMULATOR_FD
  fi
  if [[ -n "${EMULATOR_PID:-}" ]]; then
    kill "$EMULATOR_PID" 2>/dev/null || true
    unset EMULATOR_PID
  fi
}
