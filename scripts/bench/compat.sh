#!/usr/bin/env bash
# What the Confluent compatibility layer costs: the same sync load through floodgate's /v1,
# Confluent v2 (json embedded format) and Confluent v3 (records as concatenated objects, one
# delivery report each), with 1 and 100 records of 200 bytes per request, against Tansu, in
# interleaved rounds. Prints requests/s and records/s per run and the medians.
#   scripts/bench/compat.sh [BIN_DIR]       (default ${CARGO_TARGET_DIR:-target}/release; ROUNDS=3 SECS=5)
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/bench/lib.sh
FLOODGATE=${1:-$BIN_DIR}/floodgate
ROUNDS=${ROUNDS:-3}
SECS=${SECS:-5}
KAFKA_PORT=19592
PORT=18580
ADMIN_PORT=18590
bench_build

bench_tansu_start "$KAFKA_PORT"
trap bench_cleanup EXIT
bench_topics "127.0.0.1:$KAFKA_PORT" bench.compat

KEY=compat-key
{
  bench_config "$PORT" "$ADMIN_PORT" "127.0.0.1:$KAFKA_PORT"
  bench_tenant compat "$KEY" "bench.*" "max_buffer_share = 1.0"
} > "$OUT/compat.toml"
bench_floodgate "$OUT/compat.toml" "$OUT/floodgate-compat.log" "$ADMIN_PORT"
sleep 2

results="$OUT/compat-results.txt"
: > "$results"
for round in $(seq 1 "$ROUNDS"); do
  for rpr in 1 100; do
    for api in v1 v2 v3; do
      "${LOAD[@]}" run --url "http://127.0.0.1:$PORT" --topic bench.compat --api "$api" \
        --tenant "$KEY" --records-per-request "$rpr" --record-size 200 --duration-secs "$SECS" \
        --concurrency 64 --json "$OUT/compat-$api-$rpr.json" > /dev/null 2>&1
      python3 - "$OUT/compat-$api-$rpr.json" "$api" "$rpr" "$round" >> "$results" <<'PY'
import json, sys
path, api, rpr, rnd = sys.argv[1:]
s = json.load(open(path))
t = s["tenants"][0] if isinstance(s.get("tenants"), list) else list(s.get("tenants", {}).values())[0]
rate = t.get("admitted_per_sec") or t.get("admitted_rate") or 0
errors = t.get("errors", {})
print(f"{rnd} {rpr} {api} {rate:.1f} {sum(errors.values()) if isinstance(errors, dict) else errors}")
PY
      tail -1 "$results"
    done
  done
done
echo "medians (requests/s):"
python3 - "$results" <<'PY'
import sys, statistics, collections
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    rnd, rpr, api, rate, errors = line.split()
    runs[(int(rpr), api)].append(float(rate))
for rpr in (1, 100):
    base = statistics.median(runs[(rpr, "v1")])
    for api in ("v1", "v2", "v3"):
        m = statistics.median(runs[(rpr, api)])
        print(f"  {rpr:>3} records/request {api}: {m:10.1f} requests/s = {m * rpr:10.1f} records/s  ({m / base:.2f} of v1; rounds {', '.join(f'{r:.0f}' for r in runs[(rpr, api)])})")
PY
