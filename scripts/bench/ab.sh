#!/usr/bin/env bash
# A/B of floodgate builds on the paths #16 measures, in interleaved rounds on one broker:
#   scripts/bench/ab.sh NAME=BINARY [NAME=BINARY ...]
# Per round and per build: single-record async (64 connections) and batched async (100 records
# per request, 16 connections), SECS seconds each, with floodgate's CPU seconds from /proc; then
# the do-nothing handler (the HTTP limit) and the direct librdkafka producer with floodgate's
# settings (the Kafka limit) once per round, each with its CPU. Load generator on core 0;
# floodgate, the null handler, the direct producer and the broker on core 1. Prints each run and the medians; JSON in scripts/bench/out/ab-*.json.
# Knobs: ROUNDS (3), SECS (8), KAFKA_PORT (19592).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${ROUNDS:-3}
SECS=${SECS:-8}
KAFKA_PORT=${KAFKA_PORT:-19592}
PORT=18680
ADMIN_PORT=18690
NULL_PORT=18681
OUT=scripts/bench/out
mkdir -p "$OUT"
LOAD=(taskset -c 0 target/release/floodgate-load)
[ -x target/release/floodgate-load ] || cargo build --release -p floodgate-load

TANSU_DIR=$(mktemp -d /tmp/floodgate-ab-tansu.XXXXXX)
taskset -c 1 scripts/tansu.sh start "$KAFKA_PORT" "$TANSU_DIR" >/dev/null
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  scripts/tansu.sh stop "$TANSU_DIR" >/dev/null
}
trap cleanup EXIT
tansu topic create bench.ab --broker "tcp://127.0.0.1:$KAFKA_PORT" --partitions 3 >/dev/null
tansu topic create bench.ab-direct --broker "tcp://127.0.0.1:$KAFKA_PORT" --partitions 3 >/dev/null
RECORDS=${RECORDS:-1000000}
KEY=bench-key
cat > "$OUT/ab.toml" <<TOML
[server]
listen = "127.0.0.1:$PORT"
admin_listen = "127.0.0.1:$ADMIN_PORT"
[kafka]
bootstrap_servers = "127.0.0.1:$KAFKA_PORT"
[log]
level = "warn"
[[tenants]]
id = "bench"
api_key_sha256 = ["$(printf %s "$KEY" | sha256sum | cut -d' ' -f1)"]
topics = ["bench.*"]
TOML
wait_port() { for _ in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return; sleep 0.1; done; }
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
run() { # json name, port, records per request, concurrency, extra
  local name=$1 port=$2 rpr=$3 conc=$4
  shift 4
  "${LOAD[@]}" run --url "http://127.0.0.1:$port" --topic bench.ab --tenant "$KEY" \
    --records-per-request "$rpr" --record-size 200 --duration-secs "$SECS" \
    --concurrency "$conc" --json "$OUT/ab-$name.json" "$@" 2>/dev/null >/dev/null
  python3 -c "import json;print(json.load(open('$OUT/ab-$name.json'))['tenants'][0]['admitted_per_sec'])"
}
taskset -c 1 target/release/floodgate-load null-server --listen "127.0.0.1:$NULL_PORT" 2>/dev/null &
null_pid=$!
pids+=("$null_pid")
wait_port "$NULL_PORT"
results=$OUT/ab-results.txt
: > "$results"
for r in $(seq 1 "$ROUNDS"); do
  for spec in "$@"; do
    name=${spec%%=*}
    bin=${spec#*=}
    taskset -c 1 "$bin" --config "$OUT/ab.toml" > "$OUT/ab-$name.log" 2>&1 &
    fg=$!
    wait_port "$ADMIN_PORT"
    c0=$(cpu "$fg")
    single=$(run "$name-single-$r" "$PORT" 1 64 --async)
    c1=$(cpu "$fg")
    batched=$(run "$name-batched-$r" "$PORT" 100 16 --async)
    c2=$(cpu "$fg")
    kill -TERM "$fg"; wait "$fg" || true
    # CPU microseconds per request / per record.
    cpu_req=$(python3 -c "print(round(($c1-$c0)*1e4/($single*$SECS),2))")
    cpu_rec=$(python3 -c "print(round(($c2-$c1)*1e4/($batched*100*$SECS),3))")
    echo "round $r $name: single $single req/s ($cpu_req us CPU/req), batched $batched req/s ($cpu_rec us CPU/record)" | tee -a "$results"
  done
  n0=$(cpu "$null_pid")
  null=$(run "null-$r" "$NULL_PORT" 1 64)
  n1=$(cpu "$null_pid")
  null_cpu=$(python3 -c "print(round(($n1-$n0)*1e4/($null*$SECS),2))")
  echo "round $r null: $null req/s ($null_cpu us CPU/req)" | tee -a "$results"
  /usr/bin/time -f "%U %S" -o "$OUT/ab-direct-$r.time" taskset -c 1 target/release/floodgate-load \
    direct --bootstrap "127.0.0.1:$KAFKA_PORT" --topic bench.ab-direct --records "$RECORDS" \
    --record-size 200 --config "$OUT/ab.toml" --json "$OUT/ab-direct-$r.json" >/dev/null 2>&1
  direct=$(python3 -c "import json;print(json.load(open('$OUT/ab-direct-$r.json'))['records_per_sec'])")
  direct_cpu=$(python3 -c "u,s=open('$OUT/ab-direct-$r.time').read().split()[-2:];print(round((float(u)+float(s))*1e6/$RECORDS,3))")
  echo "round $r direct: $direct records/s ($direct_cpu us CPU/record)" | tee -a "$results"
done
python3 - "$results" <<'PY'
import re, statistics, sys, collections
runs = collections.defaultdict(lambda: collections.defaultdict(list))
for line in open(sys.argv[1]):
    m = re.match(r"round \d+ (\S+): single ([\d.]+) req/s \(([\d.]+) us CPU/req\), batched ([\d.]+) req/s \(([\d.]+) us CPU/record\)", line)
    if m:
        n = m.group(1)
        for k, v in zip(["single", "cpu_req", "batched", "cpu_rec"], m.groups()[1:]):
            runs[n][k].append(float(v))
    m = re.match(r"round \d+ null: ([\d.]+) req/s \(([\d.]+) us", line)
    if m:
        runs["null"]["single"].append(float(m.group(1)))
        runs["null"]["cpu_req"].append(float(m.group(2)))
    m = re.match(r"round \d+ direct: ([\d.]+) records/s \(([\d.]+) us", line)
    if m:
        runs["direct"]["rate"].append(float(m.group(1)))
        runs["direct"]["cpu_rec"].append(float(m.group(2)))
med = lambda n, k: statistics.median(runs[n][k])
null, null_cpu = med("null", "single"), med("null", "cpu_req")
direct, direct_cpu = med("direct", "rate"), med("direct", "cpu_rec")
print(f"medians of {len(runs['null']['single'])} interleaved rounds; null handler {null:.0f} req/s at {null_cpu:.2f} us CPU/req; "
      f"direct producer {direct:.0f} records/s at {direct_cpu:.3f} us CPU/record")
for n in runs:
    if n in ("null", "direct"):
        continue
    s, c, b, cr = med(n, "single"), med(n, "cpu_req"), med(n, "batched") * 100, med(n, "cpu_rec")
    print(f"{n}: single-record async {s:.0f} req/s = {s/null:.3f} of null (target 0.75), CPU/req {c:.2f} us = {c/null_cpu:.2f}x null's (target <= 1.33); "
          f"batched {b:.0f} records/s = {b/direct:.3f} of direct (target 0.90), CPU/record {cr:.3f} us = {cr/direct_cpu:.2f}x direct's (target <= 1.11)")
PY
