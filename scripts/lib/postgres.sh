# A private PostgreSQL 15 cluster on a loopback port for the benchmark scripts:
#   source scripts/lib/postgres.sh; start_postgres [-c setting=value ...]
# sets PG_DIR, PG_PORT, PG_PID (the postmaster) and PG_DSN; stop_postgres removes it.
start_postgres() {
  local pg_bin=/usr/lib/postgresql/15/bin
  PG_DIR="$(mktemp -d /tmp/sluice-pg-XXXXXX)"
  PG_PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
  chown postgres "$PG_DIR" && chmod 700 "$PG_DIR"
  runuser -u postgres -- "$pg_bin/initdb" -D "$PG_DIR/data" --auth=trust -U postgres -E UTF8 >/dev/null
  runuser -u postgres -- "$pg_bin/postgres" -D "$PG_DIR/data" -p "$PG_PORT" -k "$PG_DIR" \
    -c listen_addresses=127.0.0.1 -c fsync=off "$@" >"$PG_DIR/log" 2>&1 &
  PG_PID=$!
  PG_DSN="host=127.0.0.1 port=$PG_PORT user=postgres dbname=postgres"
  for _ in $(seq 1 100); do pg_isready -q -h 127.0.0.1 -p "$PG_PORT" && return 0; sleep 0.1; done
  echo "PostgreSQL did not start:" >&2
  cat "$PG_DIR/log" >&2
  return 1
}

stop_postgres() {
  if [[ -n "${PG_PID:-}" ]]; then
    # The postmaster itself, fast shutdown (runuser, PG_PID, does not pass signals on).
    runuser -u postgres -- /usr/lib/postgresql/15/bin/pg_ctl -D "$PG_DIR/data" -m fast -w \
      stop >/dev/null 2>&1 || kill -KILL "$PG_PID" 2>/dev/null || true
    wait "$PG_PID" 2>/dev/null || true
    rm -rf "$PG_DIR"
    PG_PID=""
  fi
}
