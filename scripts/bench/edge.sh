#!/usr/bin/env bash
# What hostile clients cost floodgate at the edge, on `floodgate dev` (in-process broker):
#  1. HTTP/2 upload flood: C connections x M streams each POST a 4 MiB body at once (h2load,
#     prior-knowledge h2c). Prints floodgate's peak RSS: the body budget and the HTTP/2
#     stream and window bounds keep it flat however many streams try.
#  2. Bad-key flood: N requests with a wrong API key over HTTP/1.1 (h2load --h1). Prints the
#     CPU floodgate spent per request (utime+stime from /proc), and how they were answered.
#   scripts/bench/edge.sh [BIN_DIR]        (default ${CARGO_TARGET_DIR:-target}/release; needs h2load: apt-get install nghttp2-client)
# Load generator on core 0, floodgate on core 1.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/bench/lib.sh
FLOODGATE=${1:-$BIN_DIR}/floodgate
PORT=${EDGE_PORT:-18480}
ADMIN_PORT=${EDGE_ADMIN_PORT:-18490}
C=${EDGE_CONNECTIONS:-8}
M=${EDGE_STREAMS:-100}
FLOOD=${EDGE_FLOOD_REQUESTS:-100000}
WORK=$(mktemp -d /tmp/floodgate-edge.XXXXXX)
command -v h2load >/dev/null || { echo "h2load missing: apt-get install nghttp2-client" >&2; exit 1; }

export FLOODGATE__SERVER__LISTEN="127.0.0.1:$PORT" FLOODGATE__SERVER__ADMIN_LISTEN="127.0.0.1:$ADMIN_PORT"
export FLOODGATE__LOG__LEVEL=error
trap bench_cleanup EXIT

python3 -c "import json;print(json.dumps({'records':[{'value':'x'*(4*1024*1024-40)}]}))" > "$WORK/body.json"
URL="http://127.0.0.1:$PORT/v1/topics/events.demo/records"

bench_dev "$WORK/out.log"
idle=$(awk '/VmRSS/{printf "%.1f", $2/1024}' "/proc/$FG/status")
taskset -c 0 h2load -c "$C" -m "$M" -n $((C * M)) -d "$WORK/body.json" \
  -H 'content-type: application/json' -H "authorization: Bearer $KEY" "$URL" > "$WORK/h2.txt" 2>&1 || true
peak=$(awk '/VmHWM/{printf "%.1f", $2/1024}' "/proc/$FG/status")
codes=$(grep -E '^status codes' "$WORK/h2.txt" | sed 's/^status codes: //')
reqs=$(grep -E '^requests:' "$WORK/h2.txt" | sed 's/^requests: //')
echo "h2 upload flood ($reqs): $C connections x $M streams x 4 MiB bodies: RSS idle ${idle} MiB, peak ${peak} MiB; status codes: $codes"
bench_stop "$FG"

bench_dev "$WORK/out.log"
before=$(cpu "$FG")
echo '{"records":[{"value":1}]}' > "$WORK/one.json"
taskset -c 0 h2load --h1 -c 32 -n "$FLOOD" -H 'authorization: Bearer wrong-key-0123456789' \
  -H 'content-type: application/json' -d "$WORK/one.json" "$URL" > "$WORK/flood.txt" 2>&1 || true
after=$(cpu "$FG")
hz=$(getconf CLK_TCK)
done_n=$(awk '/^requests:/{print $6}' "$WORK/flood.txt")
codes=$(grep -E '^status codes' "$WORK/flood.txt" | sed 's/^status codes: //')
rate=$(awk '/^finished in/{print $4, $5}' "$WORK/flood.txt")
echo "bad-key flood: $done_n requests ($rate): $(awk -v t=$((after - before)) -v hz="$hz" -v n="$done_n" 'BEGIN{printf "%.1f", t / hz / n * 1e6}') us of floodgate CPU per request; status codes: $codes"
