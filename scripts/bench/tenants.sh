#!/usr/bin/env bash
# Many tenants on one gateway (scripts/bench/tenants.py): start-up, RSS at rest and after ten scrapes,
# scrape size and time, /admin/status and /admin/tenants, the status page in headless Chromium
# (selenium from the UI check's venv), at each tenant count; Tansu on loopback as the broker.
#   scripts/bench/tenants.sh [1000 10000 100000]
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/bench/lib.sh
PORT=19592
export FLOODGATE_BIN=${FLOODGATE_BIN:-$FLOODGATE}
[ -x "$FLOODGATE_BIN" ] || cargo build --release --bin floodgate
bench_tansu_start "$PORT"
trap bench_tansu_stop EXIT
wait_port "$PORT"
bench_topics "127.0.0.1:$PORT" events.demo
VENV=${UI_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/floodgate/ui-venv}
PY=python3
if [ -x "$VENV/bin/python" ]; then PY="$VENV/bin/python"; fi
BOOTSTRAP="127.0.0.1:$PORT" "$PY" scripts/bench/tenants.py "$@"
