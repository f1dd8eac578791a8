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
OUT=scripts/bench/out
mkdir -p "$OUT"
[ -x target/release/floodgate ] && [ -x target/release/floodgate-load ] ||
  cargo build --release --workspace --bins
LOAD=(taskset -c 0 target/release/floodgate-load)

bench_tansu_start "$KAFKA_PORT"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  bench_tansu_stop
}
trap cleanup EXIT
tansu topic create bench.keys --broker "tcp://127.0.0.1:$KAFKA_PORT" --partitions 3 >/dev/null
taskset -c 1 redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no \
  > "$OUT/idempotency-redis.log" 2>&1 &
pids+=("$!")
wait_port "$REDIS_PORT"

config() { # name, produce port, admin port, extra section
  cat > "$OUT/idempotency-$1.toml" <<TOML
[server]
listen = "127.0.0.1:$2"
admin_listen = "127.0.0.1:$3"
[kafka]
bootstrap_servers = "127.0.0.1:$KAFKA_PORT"
[log]
level = "warn"
$4
[[tenants]]
id = "open"
api_key_sha256 = ["$(digest open-key)"]
topics = ["bench.*"]
TOML
}
config local 18980 18990 ""
config redis 18981 18991 "[cluster]
redis_url = \"redis://127.0.0.1:$REDIS_PORT\"
key_prefix = \"fgbench-$$\"
expected_replicas = 1"
declare -A PID PORT=([local]=18980 [redis]=18981)
for mode in local redis; do
  taskset -c 1 target/release/floodgate --config "$OUT/idempotency-$mode.toml" \
    > "$OUT/idempotency-$mode.log" 2>&1 &
  PID[$mode]=$!
  pids+=("$!")
done
wait_port 18990
wait_port 18991

run() { # name, mode, extra load flags...
  local name=$1 mode=$2 c0 c1
  shift 2
  c0=$(cpu "${PID[$mode]}")
  "${LOAD[@]}" run --url "http://127.0.0.1:${PORT[$mode]}" --topic bench.keys --tenant open-key \
    --records-per-request 1 --record-size 200 --duration-secs "$SECS" --concurrency 64 "$@" \
    --json "$OUT/idempotency-$name.json" >/dev/null 2>&1
  c1=$(cpu "${PID[$mode]}")
  echo "$name $c0 $c1" >> "$OUT/idempotency-cpu.txt"
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
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
cpu = {l.split()[0]: (float(l.split()[1]), float(l.split()[2])) for l in open(f"{out}/idempotency-cpu.txt")}
runs = [f"{m}-{a}-{k}" for m in ("local", "redis") for a in ("async", "sync") for k in ("plain", "keyed")]
us, rate, p99 = {n: [] for n in runs}, {n: [] for n in runs}, {n: [] for n in runs}
for r in range(1, rounds + 1):
    for n in runs:
        d = json.load(open(f"{out}/idempotency-{n}-{r}.json"))
        t = d["tenants"][0]
        done = t["admitted_per_sec"] * d["duration_secs"]
        c0, c1 = cpu[f"{n}-{r}"]
        us[n].append((c1 - c0) / 100 / done * 1e6)
        rate[n].append(t["admitted_per_sec"])
        p99[n].append(t["latency_ms"]["p99"])
    print(f"round {r}: " + ", ".join(f"{n} {us[n][-1]:.1f} us" for n in runs))
med = statistics.median
print(f"medians of {rounds} interleaved rounds (CPU per admitted request, requests/s, p99 latency):")
for m in ("local", "redis"):
    for a in ("async", "sync"):
        plain, keyed = f"{m}-{a}-plain", f"{m}-{a}-keyed"
        print(f"  {m:>5} {a:>5}: unkeyed {med(us[plain]):6.1f} us ({med(rate[plain]):6.0f}/s, p99 {med(p99[plain]):.1f} ms)"
              f"  keyed {med(us[keyed]):6.1f} us ({med(rate[keyed]):6.0f}/s, p99 {med(p99[keyed]):.1f} ms)"
              f"  = {100 * (med(us[keyed]) / med(us[plain]) - 1):+.1f} %")
PY
