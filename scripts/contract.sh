#!/usr/bin/env bash
# Outside tools check floodgate against what it promises, on a live gateway:
#   - schemathesis fuzzes every operation in openapi.json on both listeners (fixed seed,
#     bounded time) and fails on any response that breaks the document or any 5xx;
#   - promtool lints the live /metrics exposition.
# The gateway is `floodgate dev` (in-process broker, demo tenant) on loopback ports, as a
# cluster member with a Redis of its own when redis-server is installed (so the cluster
# metrics are linted too).
#   scripts/contract.sh [SECONDS_PER_LISTENER]      (default 60)
# Needs: target/debug/floodgate (cargo build), promtool, and schemathesis in $VENV
# (default ~/.cache/floodgate/contract-venv; created here when missing).
set -euo pipefail
cd "$(dirname "$0")/.."

SECONDS_PER_LISTENER=${1:-60}
VENV=${VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/floodgate/contract-venv}
SEED=${CONTRACT_SEED:-20261130}
PRODUCE_PORT=${CONTRACT_PRODUCE_PORT:-18280}
ADMIN_PORT=${CONTRACT_ADMIN_PORT:-18290}
BIN=target/debug/floodgate

# The contract checked is the one its generator makes (no edit by hand it would undo).
python3 scripts/openapi.py --check

if [ ! -x "$VENV/bin/schemathesis" ]; then
  mkdir -p "$(dirname "$VENV")"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q 'schemathesis==4.32.5'
fi

WORK=$(mktemp -d /tmp/floodgate-contract.XXXXXX)
TOKEN=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
REDIS_PID=""
if command -v redis-server >/dev/null; then
  REDIS_PORT=${CONTRACT_REDIS_PORT:-18379}
  redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no > "$WORK/redis.log" 2>&1 &
  REDIS_PID=$!
  export FLOODGATE__CLUSTER__REDIS_URL="redis://127.0.0.1:$REDIS_PORT"
fi
FLOODGATE_ADMIN_TOKEN="ci:$TOKEN" \
FLOODGATE__SERVER__LISTEN="127.0.0.1:$PRODUCE_PORT" \
FLOODGATE__SERVER__ADMIN_LISTEN="127.0.0.1:$ADMIN_PORT" \
FLOODGATE__SERVER__AUTH_FAILURES_PER_SEC=100000 \
FLOODGATE__SERVER__AUTH_FAILURES_BURST=100000 \
  "$BIN" --config "$WORK/none.toml" dev > "$WORK/out.log" 2>&1 &
PID=$!
trap 'kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; [ -z "$REDIS_PID" ] || kill "$REDIS_PID" 2>/dev/null || true' EXIT

KEY=""
for _ in $(seq 1 200); do
  KEY=$(sed -n 's/^  API key: //p' "$WORK/out.log")
  [ -n "$KEY" ] && break
  sleep 0.05
done
if [ -z "$KEY" ]; then
  echo "floodgate dev did not start:" >&2
  cat "$WORK/out.log" >&2
  exit 1
fi

status=0
common=(--seed "$SEED" --max-time "$SECONDS_PER_LISTENER" --checks all --workers 1
        --generation-deterministic --request-timeout 40)

echo "== schemathesis: produce listener"
"$VENV/bin/schemathesis" --config-file scripts/schemathesis.toml run openapi.json -u "http://127.0.0.1:$PRODUCE_PORT" \
  -H "Authorization: Bearer $KEY" --include-path-regex '^/(v1|topics|v3|kafka)/' "${common[@]}" || status=1

echo "== schemathesis: admin listener"
"$VENV/bin/schemathesis" --config-file scripts/schemathesis.toml run openapi.json -u "http://127.0.0.1:$ADMIN_PORT" \
  -H "Authorization: Bearer $TOKEN" --include-path-regex '^/(admin|healthz|readyz|metrics|ui)' "${common[@]}" || status=1

echo "== promtool check metrics"
if ! curl -sf "http://127.0.0.1:$ADMIN_PORT/metrics" | promtool check metrics; then
  status=1
fi

exit "$status"
