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
tansu topic create bench.cost --broker "tcp://127.0.0.1:$KAFKA_PORT" --partitions 3 >/dev/null

cat > "$OUT/request-cost.toml" <<TOML
[server]
listen = "127.0.0.1:$PORT"
admin_listen = "127.0.0.1:$ADMIN_PORT"
[kafka]
bootstrap_servers = "127.0.0.1:$KAFKA_PORT"
[log]
level = "warn"
[[tenants]]
id = "open"
api_key_sha256 = ["$(digest open-key)"]
topics = ["bench.*"]
[[tenants]]
id = "spent"
api_key_sha256 = ["$(digest spent-key)"]
topics = ["bench.*"]
records_per_sec = 1
records_burst = 1
TOML
taskset -c 1 target/release/floodgate --config "$OUT/request-cost.toml" > "$OUT/request-cost.log" 2>&1 &
fg=$!
pids+=("$fg")
taskset -c 1 target/release/floodgate-load null-server --listen "127.0.0.1:$NULL_PORT" 2>/dev/null &
null=$!
pids+=("$null")
wait_port "$ADMIN_PORT"
wait_port "$NULL_PORT"

run() { # name, pid, url, key
  local name=$1 pid=$2 url=$3 key=$4 c0 c1
  c0=$(cpu "$pid")
  "${LOAD[@]}" run --url "$url" --topic bench.cost --tenant "$key" --records-per-request 1 \
    --record-size 200 --duration-secs "$SECS" --concurrency 64 --async \
    --json "$OUT/request-cost-$name.json" >/dev/null 2>&1
  c1=$(cpu "$pid")
  echo "$name $c0 $c1" >> "$OUT/request-cost-cpu.txt"
}
: > "$OUT/request-cost-cpu.txt"
run warmup "$fg" "http://127.0.0.1:$PORT" open-key
for r in $(seq 1 "$ROUNDS"); do
  run "null-$r" "$null" "http://127.0.0.1:$NULL_PORT" open-key
  run "404-$r" "$fg" "http://127.0.0.1:$PORT/none" open-key
  run "429-$r" "$fg" "http://127.0.0.1:$PORT" spent-key
  run "202-$r" "$fg" "http://127.0.0.1:$PORT" open-key
done
python3 - "$OUT" "$ROUNDS" <<'PY' | tee "$OUT/request-cost-results.txt"
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
cpu = {l.split()[0]: (float(l.split()[1]), float(l.split()[2])) for l in open(f"{out}/request-cost-cpu.txt")}
paths = ["null", "404", "429", "202"]
us, rate = {p: [] for p in paths}, {p: [] for p in paths}
for r in range(1, rounds + 1):
    for p in paths:
        d = json.load(open(f"{out}/request-cost-{p}-{r}.json"))
        t = d["tenants"][0]
        done = t["offered_per_sec"] * d["duration_secs"]
        c0, c1 = cpu[f"{p}-{r}"]
        us[p].append((c1 - c0) / 100 / done * 1e6)
        rate[p].append(t["offered_per_sec"])
    print(f"round {r}: " + ", ".join(f"{p} {us[p][-1]:.2f} us ({rate[p][-1]:.0f} req/s)" for p in paths))
med = statistics.median
print(f"medians of {rounds} interleaved rounds, CPU per request (and requests/s):")
base = med(us["null"])
for p in paths:
    print(f"  {p:>4}: {med(us[p]):6.2f} us = {med(us[p]) / base:.2f}x the null handler's  ({med(rate[p]):.0f} req/s)")
PY
