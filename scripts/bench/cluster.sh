#!/usr/bin/env bash
# What cluster mode costs and how exactly it holds, against Tansu and a real Redis on loopback:
#  A. one replica, single-record async requests, open loop: cluster mode off vs on (a tenant
#     budget far above the load, so slices are leased and refilled all the time), interleaved
#     rounds; requests/s, the on/off ratio, and Redis commands per admitted request (from
#     Redis's own INFO counter);
#  B. three replicas sharing one tenant (RATE records/s, burst = RATE), each offered a third of
#     10 × RATE for SECS_B seconds: admitted total against the bound burst × 1.25 + rate × T.
#   scripts/bench/cluster.sh [BIN_DIR]  (default ${CARGO_TARGET_DIR:-target}/release; ROUNDS=3 SECS=5
#                                       SECS_B=10 RATE=2000 REDIS_PORT=19479)
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/bench/lib.sh
FLOODGATE=${1:-$BIN_DIR}/floodgate
PIN=() # the replicas and the broker float; only run A's load generator is pinned (core 0)
ROUNDS=${ROUNDS:-3}
SECS=${SECS:-5}
SECS_B=${SECS_B:-10}
RATE=${RATE:-2000}
KAFKA_PORT=19692
REDIS_PORT=${REDIS_PORT:-19479}
bench_build

bench_tansu_start "$KAFKA_PORT"
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no > "$OUT/redis.log" 2>&1 &
PIDS+=("$!")
trap bench_cleanup EXIT
bench_topics "127.0.0.1:$KAFKA_PORT" bench.cluster
KEY=cluster-bench-key

# config NAME PORT ADMIN_PORT CLUSTER(0|1) RECORDS_PER_SEC
config() {
  {
    bench_config "$2" "$3" "127.0.0.1:$KAFKA_PORT"
    if [ "$4" = 1 ]; then
      echo "[cluster]"
      echo "redis_url = \"redis://127.0.0.1:$REDIS_PORT\""
      echo "key_prefix = \"bench-$1\""
      echo "replica_id = \"$1\""
    fi
    bench_tenant bench "$KEY" "bench.*" "records_per_sec = $5" "records_burst = $5" "max_buffer_share = 1.0"
  } > "$OUT/cluster-$1.toml"
}

replicas=()
start() { # NAME ADMIN_PORT
  bench_floodgate "$OUT/cluster-$1.toml" "$OUT/floodgate-cluster-$1.log" "$2"
  replicas+=("$FG")
  sleep 1
}

stop_all() {
  local p
  for p in "${replicas[@]}"; do bench_stop "$p"; done
  replicas=()
}

redis_commands() {
  redis-cli -p "$REDIS_PORT" info stats | sed -n 's/^total_commands_processed:\([0-9]*\).*/\1/p'
}

echo "== A. one replica, cluster mode off vs on ($ROUNDS rounds of $SECS s each)"
results="$OUT/cluster-a.txt"
: > "$results"
for round in $(seq 1 "$ROUNDS"); do
  for mode in 0 1; do
    config "a$mode" 18680 18690 "$mode" 1000000000
    start "a$mode" 18690
    before=$(redis_commands)
    "${LOAD[@]}" run --url http://127.0.0.1:18680 --topic bench.cluster --async \
      --tenant "$KEY" --records-per-request 1 --record-size 200 --duration-secs "$SECS" \
      --concurrency 64 --json "$OUT/cluster-a$mode.json" > /dev/null 2>&1
    after=$(redis_commands)
    stop_all
    python3 - "$OUT/cluster-a$mode.json" "$mode" "$round" "$((after - before))" "$SECS" >> "$results" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))["tenants"][0]
admitted = t["admitted_per_sec"] * float(sys.argv[5])
per = int(sys.argv[4]) / admitted if admitted else float("nan")
print(sys.argv[3], sys.argv[2], t["admitted_per_sec"], int(sys.argv[4]), f"{per:.6f}")
PY
  done
done
cat "$results"
python3 - "$results" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
off = [float(r[2]) for r in rows if r[1] == "0"]
on = [float(r[2]) for r in rows if r[1] == "1"]
cmds = [float(r[4]) for r in rows if r[1] == "1"]
ratios = [b / a for a, b in zip(off, on)]
print(f"off: median {statistics.median(off):.0f} req/s (rounds {', '.join(f'{x:.0f}' for x in off)})")
print(f"on:  median {statistics.median(on):.0f} req/s (rounds {', '.join(f'{x:.0f}' for x in on)})")
print(f"on/off per round: {', '.join(f'{r:.3f}' for r in ratios)}; median {statistics.median(ratios):.3f}")
print(f"Redis commands per admitted request (cluster on): median {statistics.median(cmds):.6f}")
PY

echo "== B. three replicas, one tenant at $RATE records/s (burst $RATE), offered 10 x $RATE for $SECS_B s"
per_replica=$((RATE * 10 / 3))
for i in 1 2 3; do
  config "b" "$((18700 + i))" "$((18710 + i))" 1 "$RATE"
  sed -i "s/replica_id = \"b\"/replica_id = \"b$i\"/" "$OUT/cluster-b.toml"
  cp "$OUT/cluster-b.toml" "$OUT/cluster-b$i.toml"
  start "b$i" "$((18710 + i))"
done
for i in 1 2 3; do
  "$LOAD_BIN" run --url "http://127.0.0.1:$((18700 + i))" --topic bench.cluster --async \
    --tenant "$KEY@$per_replica" --records-per-request 1 --record-size 200 \
    --duration-secs "$SECS_B" --concurrency 64 --json "$OUT/cluster-b$i.json" > /dev/null 2>&1 &
  loads[i]=$!
done
for i in 1 2 3; do wait "${loads[$i]}"; done
stop_all
python3 - "$RATE" "$SECS_B" "$OUT"/cluster-b1.json "$OUT"/cluster-b2.json "$OUT"/cluster-b3.json <<'PY'
import json, sys
rate, secs = int(sys.argv[1]), float(sys.argv[2])
total = offered = 0.0
for i, path in enumerate(sys.argv[3:], 1):
    t = json.load(open(path))["tenants"][0]
    a = t["admitted_records_per_sec"] * secs
    total += a
    offered += t["offered_per_sec"] * secs
    print(f"replica {i}: offered {t['offered_per_sec']:.0f}/s, admitted {t['admitted_records_per_sec']:.0f}/s")
bound = rate * 1.25 + rate * secs
print(f"total admitted {total:.0f} in {secs:.0f} s (offered {offered:.0f}); rate x T = {rate * secs:.0f}; "
      f"bound burst x 1.25 + rate x T = {bound:.0f}; admitted / (rate x T) = {total / (rate * secs):.3f}; "
      f"over rate x T by {total - rate * secs:.0f} = {(total - rate * secs) / rate:.2f} x burst")
PY
