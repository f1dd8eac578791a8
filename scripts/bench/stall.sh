#!/usr/bin/env bash
# Memory under pressure, two phases against Tansu:
#  1. Stalled broker: floodgate (8 MiB buffer) takes async load; the broker is frozen with
#     SIGSTOP for 6 s and thawed with SIGCONT. Prints floodgate's RSS every second and the load
#     summary: while the broker is frozen the buffer fills, clients get 429 buffer_full, and RSS
#     stays flat instead of growing with the backlog.
#  2. Upload flood: 300 concurrent chunked uploads of 7 MiB from a tenant whose bytes burst is
#     2 MiB (scripts/bench/upload_flood.py), against a 64 MiB buffer, while a well-behaved tenant sends
#     100 requests/s. Prints peak RSS, how the uploads were answered, and the other tenant's
#     latency.
#   scripts/bench/stall.sh [BIN_DIR]     (default ${CARGO_TARGET_DIR:-target}/release; cargo build --release --workspace --bins)
# Extra environment for floodgate in phase 2: STALL_FLOOD_ENV (e.g. a body budget).
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/bench/lib.sh
KAFKA_PORT=19492
PORT=18180
ADMIN_PORT=18190
FLOODGATE=${1:-$BIN_DIR}/floodgate
bench_build

bench_tansu_start "$KAFKA_PORT"
tansu_pid=$(cat "$TANSU_DIR/tansu.pid")
trap bench_cleanup EXIT
bench_topics "127.0.0.1:$KAFKA_PORT" bench.stall

KEY=stall-key
{
  bench_config "$PORT" "$ADMIN_PORT" "127.0.0.1:$KAFKA_PORT"
  echo "[buffer]"
  echo "max_bytes = 8388608"
  echo "max_records = 100000"
  bench_tenant stall "$KEY" "bench.*" "max_buffer_share = 1.0"
} > "$OUT/stall.toml"
bench_floodgate "$OUT/stall.toml" "$OUT/floodgate-stall.log" "$ADMIN_PORT"

"${LOAD[@]}" run --url "http://127.0.0.1:$PORT" --topic bench.stall \
  --tenant "$KEY@400" --records-per-request 10 --record-size 1000 --async --duration-secs 16 \
  --concurrency 128 --json "$OUT/stall.json" 2>/dev/null > "$OUT/stall-summary.txt" &
load_pid=$!
echo "second  rss_MiB  buffer_held_MiB  broker"
for s in $(seq 0 15); do
  state=running
  if [ "$s" -ge 4 ] && [ "$s" -lt 10 ]; then state=STOPPED; fi
  [ "$s" -eq 4 ] && kill -STOP "$tansu_pid"
  [ "$s" -eq 10 ] && kill -CONT "$tansu_pid"
  rss=$(awk '/VmRSS/{printf "%.1f", $2/1024}' "/proc/$FG/status")
  held=$(curl -s "http://127.0.0.1:$ADMIN_PORT/metrics" | awk '/^floodgate_buffer_held_bytes /{printf "%.1f", $2/1048576}')
  printf "%6s  %7s  %15s  %s\n" "$s" "$rss" "$held" "$state"
  sleep 1
done
kill -CONT "$tansu_pid" 2>/dev/null || true
wait "$load_pid"
cat "$OUT/stall-summary.txt"
echo "peak RSS: $(awk '/VmHWM/{printf "%.1f MiB", $2/1024}' "/proc/$FG/status")"
bench_stop "$FG"

echo
echo "== upload flood"
bench_topics "127.0.0.1:$KAFKA_PORT" bench.flood
FLOOD_KEY=flood-key
{
  bench_config "$PORT" "$ADMIN_PORT" "127.0.0.1:$KAFKA_PORT" error
  bench_tenant flood "$FLOOD_KEY" "bench.*" "bytes_per_sec = 1048576" "bytes_burst = 2097152"
  bench_tenant steady "$KEY" "bench.*"
} > "$OUT/flood.toml"
read -ra flood_env <<< "${STALL_FLOOD_ENV:-}" # NAME=VALUE words, for floodgate only
PIN=(env "${flood_env[@]}" "${PIN[@]}")
bench_floodgate "$OUT/flood.toml" "$OUT/floodgate-flood.log" "$ADMIN_PORT"
echo "idle RSS: $(awk '/VmRSS/{printf "%.1f MiB", $2/1024}' "/proc/$FG/status")"
"${LOAD[@]}" run --url "http://127.0.0.1:$PORT" --topic bench.flood \
  --tenant "$KEY@100" --records-per-request 10 --record-size 200 --async --duration-secs 12 \
  --concurrency 16 --json "$OUT/flood-steady.json" 2>/dev/null > "$OUT/flood-steady.txt" &
steady_pid=$!
sleep 2
taskset -c 0 python3 scripts/bench/upload_flood.py 127.0.0.1 "$PORT" "$FLOOD_KEY" bench.flood 300 $((7 * 1024 * 1024))
wait "$steady_pid"
cat "$OUT/flood-steady.txt"
echo "peak RSS during the flood: $(awk '/VmHWM/{printf "%.1f MiB", $2/1024}' "/proc/$FG/status")"
