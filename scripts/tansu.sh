#!/usr/bin/env bash
# Installs (when missing) and runs Tansu, the Apache-2.0 Kafka-compatible broker our tests use.
#   scripts/tansu.sh install          install the pinned version unless it is already there
#   scripts/tansu.sh start PORT DIR   start it on 127.0.0.1:PORT with in-memory storage; the PID
#                                     goes to DIR/tansu.pid, the log to DIR/tansu.log
#   scripts/tansu.sh stop DIR         stop the broker started with that DIR
# Memory storage needs the dynostore feature (without it `memory://` is refused).
set -euo pipefail

TANSU_VERSION=0.6.0
CARGO_BIN="${CARGO_HOME:-$HOME/.cargo}/bin"
export PATH="$CARGO_BIN:$PATH"

installed() {
  command -v tansu >/dev/null 2>&1 && tansu --version 2>/dev/null | grep -q "$TANSU_VERSION"
}

install() {
  if installed; then
    echo "tansu $TANSU_VERSION already installed"
    return
  fi
  echo "installing tansu $TANSU_VERSION (a cold build takes 15-30 minutes)"
  cargo install tansu --locked --version "$TANSU_VERSION" --features dynostore
}

wait_for_port() {
  local port=$1
  for _ in $(seq 1 200); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      return 0
    fi
    sleep 0.05
  done
  return 1
}

start() {
  local port=${1:?port} dir=${2:?dir}
  mkdir -p "$dir"
  # Tansu reads ./.env: run it from a directory of its own.
  (
    cd "$dir"
    : > .env
    nohup tansu broker \
      --listener-url "tcp://127.0.0.1:$port" \
      --advertised-listener-url "tcp://127.0.0.1:$port" \
      --storage-engine "memory://tansu/" > tansu.log 2>&1 &
    echo $! > tansu.pid
  )
  if ! wait_for_port "$port"; then
    echo "tansu did not start on port $port; log:" >&2
    cat "$dir/tansu.log" >&2
    exit 1
  fi
  echo "tansu running on 127.0.0.1:$port (pid $(cat "$dir/tansu.pid"))"
}

stop() {
  local dir=${1:?dir}
  if [ -f "$dir/tansu.pid" ]; then
    local pid
    pid=$(cat "$dir/tansu.pid")
    kill -CONT "$pid" 2>/dev/null || true
    kill "$pid" 2>/dev/null || true
    rm -f "$dir/tansu.pid"
  fi
}

cmd=${1:-}
shift || true
case "$cmd" in
  install) install ;;
  start) start "$@" ;;
  stop) stop "$@" ;;
  *) echo "usage: $0 install | start PORT DIR | stop DIR" >&2; exit 2 ;;
esac
