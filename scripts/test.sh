#!/usr/bin/env bash
# The whole test suite: installs Tansu if missing, starts it and a Redis on loopback, runs
# every test against them (and librdkafka's in-process mock cluster for fault injection),
# stops them. The schema tests' venv (Confluent's Python serdes) is made or reused first.
set -euo pipefail
cd "$(dirname "$0")/.."

PORT=${FLOODGATE_TEST_PORT:-19192}
REDIS_PORT=${FLOODGATE_TEST_REDIS_PORT:-19379}
DIR=$(mktemp -d /tmp/floodgate-tansu.XXXXXX)

if ! command -v redis-server >/dev/null; then
  echo "redis-server is missing: apt-get install -y redis-server (the cluster-mode tests need it)" >&2
  exit 1
fi
scripts/tansu.sh install
scripts/tansu.sh start "$PORT" "$DIR"
# In memory only, loopback only, in the foreground of a background job so its PID is ours.
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no \
  > "$DIR/redis.log" 2>&1 &
REDIS_PID=$!
trap 'kill "$REDIS_PID" 2>/dev/null || true; scripts/tansu.sh stop "$DIR"' EXIT
for _ in $(seq 1 50); do
  redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break
  sleep 0.1
done
export FLOODGATE_TEST_REDIS="redis://127.0.0.1:$REDIS_PORT"

export FLOODGATE_TEST_BROKER="127.0.0.1:$PORT"
export FLOODGATE_TEST_BROKER_PID
FLOODGATE_TEST_BROKER_PID=$(cat "$DIR/tansu.pid")

# Confluent's Python serdes read the schema tests' records back (tests/it/tansu/schemas.rs).
export FLOODGATE_SCHEMA_VENV=${FLOODGATE_SCHEMA_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/floodgate/schema-venv}
scripts/schema-venv.sh "$FLOODGATE_SCHEMA_VENV"
# Real clients the compatibility tests drive: urllib3 (Retry honouring Retry-After) and
# Confluent's Node client for REST Proxy (tests/it/mock/retry_after.rs, tests/it/tansu/node_client.rs).
export FLOODGATE_CLIENTS=${FLOODGATE_CLIENTS:-${XDG_CACHE_HOME:-$HOME/.cache}/floodgate/clients}
scripts/clients.sh "$FLOODGATE_CLIENTS"

# The integration tests are one binary (tests/it). The ones that measure rates and latency on
# the real clock had a binary, and so the machine, to themselves; they run after the rest, on
# their own (the same binary, filtered). Arguments (cargo test's, e.g. a test name) mean one
# run of what they select.
# The admin floods' probes are timed too, and their churn of connections takes the cores.
ALONE=(mock::adaptive:: mock::admin_floods:: mock::lag_guard:: mock::retry_after:: tansu::adaptive_recovery::)
# #44's recovery test judges the median of five consecutive runs of each scenario (~3.7 min
# each); one run when it is started by hand, unless FLOODGATE_RECOVERY_RUNS says otherwise.
export FLOODGATE_RECOVERY_RUNS=${FLOODGATE_RECOVERY_RUNS:-5}
if [ $# -gt 0 ]; then
  cargo test --lib --bins --tests "$@"
else
  skips=()
  for t in "${ALONE[@]}"; do skips+=(--skip "$t"); done
  cargo test --lib --bins --tests -- "${skips[@]}"
  cargo test --test it -- "${ALONE[@]}"
fi
