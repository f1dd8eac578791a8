#!/usr/bin/env bash
# A/B of floodgate builds on the paths #16 measures, in interleaved rounds on one broker:
#   scripts/bench/ab.sh NAME=BINARY[+TOML] [NAME=BINARY[+TOML] ...]
# (+TOML: a file whose lines are added to that run's tenant, e.g. a quota, to compare one
# build with and without a setting.)
# Per round and per build: single-record async (64 connections) and batched async (100 records
# per request, 16 connections), SECS seconds each, with floodgate's CPU seconds from /proc; then
# the do-nothing handler (the HTTP limit) and the direct librdkafka producer with floodgate's
# settings (the Kafka limit) once per round, each with its CPU. Load generator on core 0;
# floodgate, the null handler, the direct producer and the broker on core 1. Prints each run and the medians; JSON in scripts/bench/out/ab-*.json.
# Knobs: ROUNDS (3), SECS (8), KAFKA_PORT (19592), AB_PORT (18680: floodgate's produce
# listener; its admin listener is AB_PORT + 10, the null handler AB_PORT + 1); PERF=fp (frame
# pointers) or PERF=dwarf records a call-graph profile of each build's single-record run in
# round 1 (scripts/bench/out/perf-NAME.data; `perf report -i` it), which the CPU figures of
# that round then include (dwarf's the most).
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/bench/lib.sh
ROUNDS=${ROUNDS:-3}
SECS=${SECS:-8}
KAFKA_PORT=${KAFKA_PORT:-19592}
PORT=${AB_PORT:-18680}
ADMIN_PORT=$((PORT + 10))
NULL_PORT=$((PORT + 1))
bench_build

bench_tansu_start "$KAFKA_PORT"
trap bench_cleanup EXIT
bench_topics "127.0.0.1:$KAFKA_PORT" bench.ab bench.ab-direct
RECORDS=${RECORDS:-1000000}
KEY=bench-key
{
  bench_config "$PORT" "$ADMIN_PORT" "127.0.0.1:$KAFKA_PORT"
  bench_tenant bench "$KEY" "bench.*"
} > "$OUT/ab.toml"
run() { # json name, port, records per request, concurrency, extra
  local name=$1 port=$2 rpr=$3 conc=$4
  shift 4
  "${LOAD[@]}" run --url "http://127.0.0.1:$port" --topic bench.ab --tenant "$KEY" \
    --records-per-request "$rpr" --record-size 200 --duration-secs "$SECS" \
    --concurrency "$conc" --json "$OUT/ab-$name.json" "$@" 2>/dev/null >/dev/null
  json_tenant "$OUT/ab-$name.json" admitted_per_sec
}
bench_null "$NULL_PORT"
results=$OUT/ab-results.txt
: > "$results"
for r in $(seq 1 "$ROUNDS"); do
  for spec in "$@"; do
    bench_spec "$spec" "$OUT/ab.toml" ab
    name=$SPEC_NAME bin=$SPEC_BIN config=$SPEC_CONFIG
    FLOODGATE=$bin bench_floodgate "$config" "$OUT/ab-$name.log" "$ADMIN_PORT"
    c0=$(cpu "$FG")
    if [ -n "${PERF:-}" ] && [ "$r" = 1 ]; then
      perf record -q --call-graph "$PERF" -p "$FG" -o "$OUT/perf-$name.data" -- sleep "$SECS" 2>/dev/null &
      perf_pid=$!
    fi
    single=$(run "$name-single-$r" "$PORT" 1 64 --async)
    if [ -n "${perf_pid:-}" ]; then
      wait "$perf_pid" || true
      perf_pid=
    fi
    c1=$(cpu "$FG")
    batched=$(run "$name-batched-$r" "$PORT" 100 16 --async)
    c2=$(cpu "$FG")
    bench_stop "$FG"
    # CPU microseconds per request / per record.
    cpu_req=$(us_per "$c1-$c0" "$single*$SECS" 2)
    cpu_rec=$(us_per "$c2-$c1" "$batched*100*$SECS")
    echo "round $r $name: single $single req/s ($cpu_req us CPU/req), batched $batched req/s ($cpu_rec us CPU/record)" | tee -a "$results"
  done
  n0=$(cpu "$NULL")
  null=$(run "null-$r" "$NULL_PORT" 1 64)
  n1=$(cpu "$NULL")
  null_cpu=$(us_per "$n1-$n0" "$null*$SECS" 2)
  echo "round $r null: $null req/s ($null_cpu us CPU/req)" | tee -a "$results"
  bench_direct "$OUT/ab-direct-$r.time" --bootstrap "127.0.0.1:$KAFKA_PORT" --topic bench.ab-direct \
    --records "$RECORDS" --record-size 200 --config "$OUT/ab.toml" --json "$OUT/ab-direct-$r.json" >/dev/null 2>&1
  direct=$(python3 -c "import json;print(json.load(open('$OUT/ab-direct-$r.json'))['records_per_sec'])")
  direct_cpu=$(time_us_per "$OUT/ab-direct-$r.time" "$RECORDS")
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
