#!/usr/bin/env bash
# Compression bombs against the release binary (#43): 200 at once of each kind — 1 GiB of
# zeros in ~1 MB of gzip and in a ~32 KB zstd frame (level 19: the largest window accepted,
# 8 MiB), and the same 1 GiB of JSON white space (valid JSON to its last byte, so only the
# inflation bounds stop it) — with floodgate's RSS sampled every 50 ms (VmRSS, and VmHWM, the
# kernel's peak) against the book's bound (Guarantees): 11 MiB + 1.3 × [buffer] max_bytes + about
# 3 × max_inflight_body_bytes + 64 KiB per open connection. Default bounds (64 MiB body budget,
# 64 MiB buffer, max_body_bytes 8 MiB, max_inflation_ratio 100). The bombs are made once and
# kept in scripts/bench/out/. Python's zstandard from scripts/clients.sh's venv. The flood comes
# from one address, so [server] max_unauthenticated_per_address is raised to N + 16 (its default,
# 128, would close the rest at accept, before a byte is read: cheap, but then fewer than N bombs
# reach the inflater). VmHWM is reset before each kind (clear_refs), so each kind's is its own.
# Knobs: N (200), PORT (19080), ADMIN_PORT (19090), KAFKA_PORT (19992), FLOODGATE_CLIENTS
# (~/.cache/floodgate/clients).
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/bench/lib.sh
N=${N:-200}
KAFKA_PORT=${KAFKA_PORT:-19992}
CLIENTS=${FLOODGATE_CLIENTS:-${XDG_CACHE_HOME:-$HOME/.cache}/floodgate/clients}
VENV=$CLIENTS/venv
PORT=${PORT:-19080}
ADMIN_PORT=${ADMIN_PORT:-19090}
bench_build
scripts/clients.sh "$CLIENTS"

bench_tansu_start "$KAFKA_PORT"
trap bench_cleanup EXIT
bench_topics "127.0.0.1:$KAFKA_PORT" bench.bombs
KEY=bench-key
{
  bench_config "$PORT" "$ADMIN_PORT" "127.0.0.1:$KAFKA_PORT"
  bench_tenant bench "$KEY" "bench.*"
} > "$OUT/bombs.toml"
FLOODGATE__SERVER__MAX_UNAUTHENTICATED_PER_ADDRESS=$((N + 16)) bench_floodgate "$OUT/bombs.toml" "$OUT/bombs.log" "$ADMIN_PORT"
rss() { awk '/^VmRSS/ {print $2}' "/proc/$FG/status"; }
hwm() { awk '/^VmHWM/ {print $2}' "/proc/$FG/status"; }
results=$OUT/bombs-results.txt
: > "$results"
# Bombs made first (minutes for zstd level 19 of 1 GiB), so the flood itself is timed alone.
for kind in gzip-zeros zstd-zeros gzip-spaces zstd-spaces; do
  "$VENV/bin/python" scripts/bench/bomb_flood.py 127.0.0.1 "$PORT" "$KEY" bench.bombs "$kind" 1 "$OUT" >/dev/null
done
echo "idle: RSS $(rss) KiB" | tee -a "$results"
for kind in gzip-zeros zstd-zeros gzip-spaces zstd-spaces; do
  peak=0
  echo 5 > "/proc/$FG/clear_refs" # VmHWM := VmRSS
  "$VENV/bin/python" scripts/bench/bomb_flood.py 127.0.0.1 "$PORT" "$KEY" bench.bombs "$kind" "$N" "$OUT" \
    > "$OUT/bombs-$kind.txt" &
  flood=$!
  while kill -0 "$flood" 2>/dev/null; do
    now=$(rss)
    [ "$now" -gt "$peak" ] && peak=$now
    sleep 0.05
  done
  wait "$flood"
  sleep 2 # lingering reads end; holds are given back
  held=$(curl -s "http://127.0.0.1:$ADMIN_PORT/metrics" | awk '$1 == "floodgate_body_inflight_bytes" {print $2}')
  inflated=$(curl -s "http://127.0.0.1:$ADMIN_PORT/metrics" |
    awk -v e="${kind%%-*}" '$1 == "floodgate_body_encoded_inflated_bytes_total{encoding=\"" e "\"}" {print $2}')
  echo "$(cat "$OUT/bombs-$kind.txt"); RSS peak (sampled) $peak KiB, VmHWM $(hwm) KiB, after $(rss) KiB; body budget held after: $held; ${kind%%-*} inflated so far: $inflated bytes" |
    tee -a "$results"
done
