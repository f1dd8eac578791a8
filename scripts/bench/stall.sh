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
#   scripts/bench/stall.sh [BIN_DIR]     (default target/release; cargo build --release --workspace --bins)
# Extra environment for floodgate in phase 2: STALL_FLOOD_ENV (e.g. a body budget).
set -euo pipefail
cd "$(dirname "$0")/../.."
KAFKA_PORT=19492
PORT=18180
ADMIN_PORT=18190
OUT=scripts/bench/out
mkdir -p "$OUT"
BIN=${1:-target/release}
LOAD=target/release/floodgate-load
[ -x "$LOAD" ] || cargo build --release --workspace --bins

scripts/tansu.sh install
TANSU_DIR=$(mktemp -d /tmp/floodgate-stall-tansu.XXXXXX)
taskset -c 1 scripts/tansu.sh start "$KAFKA_PORT" "$TANSU_DIR"
tansu_pid=$(cat "$TANSU_DIR/tansu.pid")
fg_pid=
cleanup() {
  [ -n "$fg_pid" ] && kill "$fg_pid" 2>/dev/null || true
  scripts/tansu.sh stop "$TANSU_DIR"
}
trap cleanup EXIT
tansu topic create bench.stall --broker "tcp://127.0.0.1:$KAFKA_PORT" --partitions 3 >/dev/null

KEY=stall-key
{
  echo "[server]"
  echo "listen = \"127.0.0.1:$PORT\""
  echo "admin_listen = \"127.0.0.1:$ADMIN_PORT\""
  echo "[kafka]"
  echo "bootstrap_servers = \"127.0.0.1:$KAFKA_PORT\""
  echo "[buffer]"
  echo "max_bytes = 8388608"
  echo "max_records = 100000"
  echo "[log]"
  echo "level = \"warn\""
  echo "[[tenants]]"
  echo "id = \"stall\""
  echo "api_key_sha256 = [\"$(printf %s $KEY | sha256sum | cut -d' ' -f1)\"]"
  echo "topics = [\"bench.*\"]"
  echo "max_buffer_share = 1.0"
} > "$OUT/stall.toml"
taskset -c 1 "$BIN/floodgate" --config "$OUT/stall.toml" > "$OUT/floodgate-stall.log" 2>&1 &
fg_pid=$!
for _ in $(seq 1 100); do (exec 3<>/dev/tcp/127.0.0.1/$ADMIN_PORT) 2>/dev/null && break; sleep 0.1; done

taskset -c 0 "$LOAD" run --url "http://127.0.0.1:$PORT" --topic bench.stall \
  --tenant "$KEY@400" --records-per-request 10 --record-size 1000 --async --duration-secs 16 \
  --concurrency 128 --json "$OUT/stall.json" 2>/dev/null > "$OUT/stall-summary.txt" &
load_pid=$!
echo "second  rss_MiB  buffer_held_MiB  broker"
for s in $(seq 0 15); do
  state=running
  if [ "$s" -ge 4 ] && [ "$s" -lt 10 ]; then state=STOPPED; fi
  [ "$s" -eq 4 ] && kill -STOP "$tansu_pid"
  [ "$s" -eq 10 ] && kill -CONT "$tansu_pid"
  rss=$(awk '/VmRSS/{printf "%.1f", $2/1024}' "/proc/$fg_pid/status")
  held=$(curl -s "http://127.0.0.1:$ADMIN_PORT/metrics" | awk '/^floodgate_buffer_held_bytes /{printf "%.1f", $2/1048576}')
  printf "%6s  %7s  %15s  %s\n" "$s" "$rss" "$held" "$state"
  sleep 1
done
kill -CONT "$tansu_pid" 2>/dev/null || true
wait "$load_pid"
cat "$OUT/stall-summary.txt"
echo "peak RSS: $(awk '/VmHWM/{printf "%.1f MiB", $2/1024}' "/proc/$fg_pid/status")"
kill "$fg_pid"; wait "$fg_pid" 2>/dev/null || true

echo
echo "== upload flood"
tansu topic create bench.flood --broker "tcp://127.0.0.1:$KAFKA_PORT" --partitions 3 >/dev/null
FLOOD_KEY=flood-key
{
  echo "[server]"
  echo "listen = \"127.0.0.1:$PORT\""
  echo "admin_listen = \"127.0.0.1:$ADMIN_PORT\""
  echo "[kafka]"
  echo "bootstrap_servers = \"127.0.0.1:$KAFKA_PORT\""
  echo "[log]"
  echo "level = \"error\""
  echo "[[tenants]]"
  echo "id = \"flood\""
  echo "api_key_sha256 = [\"$(printf %s $FLOOD_KEY | sha256sum | cut -d' ' -f1)\"]"
  echo "topics = [\"bench.*\"]"
  echo "bytes_per_sec = 1048576"
  echo "bytes_burst = 2097152"
  echo "[[tenants]]"
  echo "id = \"steady\""
  echo "api_key_sha256 = [\"$(printf %s $KEY | sha256sum | cut -d' ' -f1)\"]"
  echo "topics = [\"bench.*\"]"
} > "$OUT/flood.toml"
env ${STALL_FLOOD_ENV:-} taskset -c 1 "$BIN/floodgate" --config "$OUT/flood.toml" > "$OUT/floodgate-flood.log" 2>&1 &
fg_pid=$!
for _ in $(seq 1 100); do (exec 3<>/dev/tcp/127.0.0.1/$ADMIN_PORT) 2>/dev/null && break; sleep 0.1; done
echo "idle RSS: $(awk '/VmRSS/{printf "%.1f MiB", $2/1024}' "/proc/$fg_pid/status")"
taskset -c 0 "$LOAD" run --url "http://127.0.0.1:$PORT" --topic bench.flood \
  --tenant "$KEY@100" --records-per-request 10 --record-size 200 --async --duration-secs 12 \
  --concurrency 16 --json "$OUT/flood-steady.json" 2>/dev/null > "$OUT/flood-steady.txt" &
steady_pid=$!
sleep 2
taskset -c 0 python3 scripts/bench/upload_flood.py 127.0.0.1 "$PORT" "$FLOOD_KEY" bench.flood 300 $((7 * 1024 * 1024))
wait "$steady_pid"
cat "$OUT/flood-steady.txt"
echo "peak RSS during the flood: $(awk '/VmHWM/{printf "%.1f MiB", $2/1024}' "/proc/$fg_pid/status")"
