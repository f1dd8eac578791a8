#!/usr/bin/env bash
# Where a single-record request's CPU goes (issue #16's CPU-per-request target): floodgate's
# CPU per request on four paths of increasing work, beside the do-nothing handler, in ROUNDS
# interleaved rounds of SECS seconds each (64 connections, closed loop, single-record async):
#   null     — the do-nothing axum handler (the HTTP limit);
#   404      — floodgate's produce listener, unknown path: connection handling, the edge
#              middleware (drain check, timing, metrics) and a JSON error;
#   429      — a known tenant whose budget is spent: the above plus authentication (SHA-256 of
#              the key), topic check, the early budget check and a 429 with RateLimit fields;
#   202      — admitted: the above plus reading and parsing the body, admission, the buffer,
#              librdkafka's enqueue and delivery report.
# Load generator on core 0; floodgate, the null handler and the broker on core 1.
# Knobs: ROUNDS (3), SECS (8), KAFKA_PORT (19792).
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/bench/lib.sh
ROUNDS=${ROUNDS:-3}
SECS=${SECS:-8}
KAFKA_PORT=${KAFKA_PORT:-19792}
PORT=18880
ADMIN_PORT=18890
NULL_PORT=18881
bench_build

bench_tansu_start "$KAFKA_PORT"
trap bench_cleanup EXIT
bench_topics "127.0.0.1:$KAFKA_PORT" bench.cost

{
  bench_config "$PORT" "$ADMIN_PORT" "127.0.0.1:$KAFKA_PORT"
  bench_tenant open open-key "bench.*"
  bench_tenant spent spent-key "bench.*" "records_per_sec = 1" "records_burst = 1"
} > "$OUT/request-cost.toml"
bench_floodgate "$OUT/request-cost.toml" "$OUT/request-cost.log" "$ADMIN_PORT"
bench_null "$NULL_PORT"

run() { # name, pid, url, key
  bench_cpu_run "$1" "$2" "$OUT/request-cost-cpu.txt" --url "$3" --topic bench.cost --tenant "$4" \
    --records-per-request 1 --record-size 200 --duration-secs "$SECS" --concurrency 64 --async \
    --json "$OUT/request-cost-$1.json"
}
: > "$OUT/request-cost-cpu.txt"
run warmup "$FG" "http://127.0.0.1:$PORT" open-key
for r in $(seq 1 "$ROUNDS"); do
  run "null-$r" "$NULL" "http://127.0.0.1:$NULL_PORT" open-key
  run "404-$r" "$FG" "http://127.0.0.1:$PORT/none" open-key
  run "429-$r" "$FG" "http://127.0.0.1:$PORT" spent-key
  run "202-$r" "$FG" "http://127.0.0.1:$PORT" open-key
done
python3 - "$OUT" "$ROUNDS" <<'PY' | tee "$OUT/request-cost-results.txt"
import statistics, sys
sys.path.insert(0, "scripts/bench")
from rounds import cpu_per_request
out, rounds = sys.argv[1], int(sys.argv[2])
paths = ["null", "404", "429", "202"]
us, tenants = cpu_per_request(f"{out}/request-cost-cpu.txt", out + "/request-cost-{}-{}.json", paths, rounds,
                              "offered_per_sec")
rate = {p: [t["offered_per_sec"] for t in tenants[p]] for p in paths}
for r in range(rounds):
    print(f"round {r + 1}: " + ", ".join(f"{p} {us[p][r]:.2f} us ({rate[p][r]:.0f} req/s)" for p in paths))
med = statistics.median
print(f"medians of {rounds} interleaved rounds, CPU per request (and requests/s):")
base = med(us["null"])
for p in paths:
    print(f"  {p:>4}: {med(us[p]):6.2f} us = {med(us[p]) / base:.2f}x the null handler's  ({med(rate[p]):.0f} req/s)")
PY
