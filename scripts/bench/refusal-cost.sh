#!/usr/bin/env bash
# What a refused request costs floodgate (CPU per request, RSS kept), per refusal reason,
# against a plain 401 (#37: a refusal stays cheap). The schema step's cases are listed in
# scripts/bench/refusal_cost.py; each is a shape the review used to make a refused request
# cost seconds of CPU, gigabytes of memory or a registry write. Starts its own Tansu, a small
# Schema Registry (scripts/bench/schema_registry.py) and the release floodgate, on core 1.
# Knobs: KAFKA_PORT (19793), PORT, ADMIN_PORT, REGISTRY_PORT (18882, 18892, 18883), SCALE
# (1.0: the requests per case, scaled), CASES (all).
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/bench/lib.sh
KAFKA_PORT=${KAFKA_PORT:-19793}
SCALE=${SCALE:-1.0}
PORT=${PORT:-18882}
ADMIN_PORT=${ADMIN_PORT:-18892}
REGISTRY_PORT=${REGISTRY_PORT:-18883}
# Only the gateway is needed (no load tool: the requests are the script's own).
[ -x "$FLOODGATE" ] || cargo build --release --bin floodgate

bench_tansu_start "$KAFKA_PORT"
trap bench_cleanup EXIT
bench_topics "127.0.0.1:$KAFKA_PORT" bench.refusal
python3 scripts/bench/schema_registry.py "$REGISTRY_PORT" &
PIDS+=($!)
wait_port "$REGISTRY_PORT"

{
  bench_config "$PORT" "$ADMIN_PORT" "127.0.0.1:$KAFKA_PORT" error
  printf '[schema_registry]\nurl = "http://127.0.0.1:%s"\n' "$REGISTRY_PORT"
  bench_tenant bench bench-key "bench.*"
  bench_tenant spent spent-key "bench.*" "records_per_sec = 1" "records_burst = 1"
  bench_tenant regs regs-key "bench.*"
} > "$OUT/refusal-cost.toml"
bench_floodgate "$OUT/refusal-cost.toml" "$OUT/refusal-cost.log" "$ADMIN_PORT"
# shellcheck disable=SC2086 # CASES is a list of names
python3 scripts/bench/refusal_cost.py "$PORT" "$REGISTRY_PORT" "$FG" "$SCALE" ${CASES:-} \
  | tee "$OUT/refusal-cost-results.txt"
