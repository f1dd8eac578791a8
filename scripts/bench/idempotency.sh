#!/usr/bin/env bash
# What an Idempotency-Key costs (issue #30): floodgate's CPU per single-record request with a
# key of its own and without, async (202) and sync (200), on a single replica (keys in memory)
# and on a cluster-mode replica (keys in Redis), in ROUNDS interleaved rounds of SECS seconds
# each (64 connections, closed loop, 200-byte records; every keyed request carries a key never
# seen before, so each one is claimed and its answer stored — the full cost, no replays).
# Load generator on core 0; floodgate, the broker and Redis on core 1.
# Knobs: ROUNDS (3), SECS (8), KAFKA_PORT (19492), REDIS_PORT (19679).
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/bench/lib.sh
ROUNDS=${ROUNDS:-3}
SECS=${SECS:-8}
KAFKA_PORT=${KAFKA_PORT:-19492}
REDIS_PORT=${REDIS_PORT:-19679}
bench_build

bench_tansu_start "$KAFKA_PORT"
trap bench_cleanup EXIT
bench_topics "127.0.0.1:$KAFKA_PORT" bench.keys
"${PIN[@]}" redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no \
  > "$OUT/idempotency-redis.log" 2>&1 &
PIDS+=("$!")
wait_port "$REDIS_PORT"

config() { # name, produce port, admin port, extra section
  {
    bench_config "$2" "$3" "127.0.0.1:$KAFKA_PORT"
    echo "$4"
    bench_tenant open open-key "bench.*"
  } > "$OUT/idempotency-$1.toml"
}
config local 18980 18990 ""
config redis 18981 18991 "[cluster]
redis_url = \"redis://127.0.0.1:$REDIS_PORT\"
key_prefix = \"fgbench-$$\"
expected_replicas = 1"
declare -A PID PORT=([local]=18980 [redis]=18981)
bench_floodgate "$OUT/idempotency-local.toml" "$OUT/idempotency-local.log" 18990
PID[local]=$FG
bench_floodgate "$OUT/idempotency-redis.toml" "$OUT/idempotency-redis.log" 18991
PID[redis]=$FG

run() { # name, mode, extra load flags...
  local name=$1 mode=$2
  shift 2
  bench_cpu_run "$name" "${PID[$mode]}" "$OUT/idempotency-cpu.txt" \
    --url "http://127.0.0.1:${PORT[$mode]}" --topic bench.keys --tenant open-key \
    --records-per-request 1 --record-size 200 --duration-secs "$SECS" --concurrency 64 "$@" \
    --json "$OUT/idempotency-$name.json"
}
: > "$OUT/idempotency-cpu.txt"
run warmup-local local --async --idempotency-keys
run warmup-redis redis --async --idempotency-keys
for r in $(seq 1 "$ROUNDS"); do
  for mode in local redis; do
    run "$mode-async-plain-$r" "$mode" --async
    run "$mode-async-keyed-$r" "$mode" --async --idempotency-keys
    run "$mode-sync-plain-$r" "$mode"
    run "$mode-sync-keyed-$r" "$mode" --idempotency-keys
  done
done
python3 - "$OUT" "$ROUNDS" <<'PY' | tee "$OUT/idempotency-results.txt"
import statistics, sys
sys.path.insert(0, "scripts/bench")
from rounds import cpu_per_request
out, rounds = sys.argv[1], int(sys.argv[2])
runs = [f"{m}-{a}-{k}" for m in ("local", "redis") for a in ("async", "sync") for k in ("plain", "keyed")]
us, tenants = cpu_per_request(f"{out}/idempotency-cpu.txt", out + "/idempotency-{}-{}.json", runs, rounds,
                              "admitted_per_sec")
rate = {n: [t["admitted_per_sec"] for t in tenants[n]] for n in runs}
p99 = {n: [t["latency_ms"]["p99"] for t in tenants[n]] for n in runs}
for r in range(rounds):
    print(f"round {r + 1}: " + ", ".join(f"{n} {us[n][r]:.1f} us" for n in runs))
med = statistics.median
print(f"medians of {rounds} interleaved rounds (CPU per admitted request, requests/s, p99 latency):")
for m in ("local", "redis"):
    for a in ("async", "sync"):
        plain, keyed = f"{m}-{a}-plain", f"{m}-{a}-keyed"
        print(f"  {m:>5} {a:>5}: unkeyed {med(us[plain]):6.1f} us ({med(rate[plain]):6.0f}/s, p99 {med(p99[plain]):.1f} ms)"
              f"  keyed {med(us[keyed]):6.1f} us ({med(rate[keyed]):6.0f}/s, p99 {med(p99[keyed]):.1f} ms)"
              f"  = {100 * (med(us[keyed]) / med(us[plain]) - 1):+.1f} %")
PY
