# Sourced by scripts: start_rabbitmq starts a private RabbitMQ (Debian's
# rabbitmq-server) on loopback ephemeral ports, with its own node name, data
# directory and epmd, and sets RABBITMQ_PORT; stop_rabbitmq (also on exit) stops it.
rabbitmq_free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

rabbitmq_env() {
  env HOME="$RABBITMQ_DIR/home" RABBITMQ_NODENAME="sluice$RABBITMQ_PORT@localhost" \
    RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 RABBITMQ_NODE_PORT="$RABBITMQ_PORT" \
    RABBITMQ_DIST_PORT="$RABBITMQ_DIST_PORT" ERL_EPMD_PORT="$RABBITMQ_EPMD_PORT" \
    ERL_EPMD_ADDRESS=127.0.0.1 RABBITMQ_MNESIA_BASE="$RABBITMQ_DIR/mnesia" \
    RABBITMQ_LOG_BASE="$RABBITMQ_DIR/log" RABBITMQ_PID_FILE="$RABBITMQ_DIR/pid" \
    RABBITMQ_CONF_ENV_FILE="$RABBITMQ_DIR/conf.env" \
    RABBITMQ_ENABLED_PLUGINS_FILE="$RABBITMQ_DIR/plugins" \
    PATH="/usr/lib/rabbitmq/bin:$PATH" "$@"
}

start_rabbitmq() {
  RABBITMQ_DIR="$(mktemp -d /tmp/sluice-rabbitmq-XXXXXX)"
  mkdir -p "$RABBITMQ_DIR/home"
  : >"$RABBITMQ_DIR/conf.env"
  echo '[].' >"$RABBITMQ_DIR/plugins"
  RABBITMQ_PORT="$(rabbitmq_free_port)"
  RABBITMQ_DIST_PORT="$(rabbitmq_free_port)"
  RABBITMQ_EPMD_PORT="$(rabbitmq_free_port)"
  trap stop_rabbitmq EXIT
  # Our own epmd in the foreground, so that it stops with us.
  /usr/bin/epmd -port "$RABBITMQ_EPMD_PORT" -address 127.0.0.1 >/dev/null 2>&1 &
  RABBITMQ_EPMD_PID=$!
  rabbitmq_env /usr/lib/rabbitmq/bin/rabbitmq-server >"$RABBITMQ_DIR/server.log" 2>&1 &
  RABBITMQ_PID=$!
  for _ in $(seq 1 600); do
    if (echo >"/dev/tcp/127.0.0.1/$RABBITMQ_PORT") 2>/dev/null; then return 0; fi
    if ! kill -0 "$RABBITMQ_PID" 2>/dev/null; then break; fi
    sleep 0.1
  done
  echo "RabbitMQ did not start:" >&2
  tail -20 "$RABBITMQ_DIR/server.log" >&2
  return 1
}

# The broker's own counts: name ready unacknowledged consumers.
rabbitmq_queues() {
  rabbitmq_env /usr/lib/rabbitmq/bin/rabbitmqctl -q list_queues name messages_ready \
    messages_unacknowledged consumers
}

stop_rabbitmq() {
  if [[ -n "${RABBITMQ_PID:-}" ]]; then
    rabbitmq_env /usr/lib/rabbitmq/bin/rabbitmqctl shutdown >/dev/null 2>&1 ||
      kill "$RABBITMQ_PID" 2>/dev/null || true
    wait "$RABBITMQ_PID" 2>/dev/null || true
    unset RABBITMQ_PID
  fi
  if [[ -n "${RABBITMQ_EPMD_PID:-}" ]]; then
    kill "$RABBITMQ_EPMD_PID" 2>/dev/null || true
    wait "$RABBITMQ_EPMD_PID" 2>/dev/null || true
    unset RABBITMQ_EPMD_PID
  fi
  [[ -n "${RABBITMQ_DIR:-}" ]] && rm -rf "$RABBITMQ_DIR"
  unset RABBITMQ_DIR
}
