#!/usr/bin/env bash
# librdkafka settings against the batched ratio (issue #16): for each variant of
# [kafka.producer], floodgate's batched async throughput (100 records of 200 B per request, 16
# connections) and CPU per record, and the direct librdkafka producer's with the very same
# settings (its records/s, CPU per record and delivery p99) — in ROUNDS interleaved rounds on
# one Tansu broker. Load generator on core 0; floodgate, the direct producer and the broker on
# core 1. Prints each run and the medians per variant.
# Knobs: ROUNDS (2), SECS (8), RECORDS (500000), KAFKA_PORT (19792).
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/bench/lib.sh
ROUNDS=${ROUNDS:-2}
SECS=${SECS:-8}
RECORDS=${RECORDS:-500000}
KAFKA_PORT=${KAFKA_PORT:-19792}
PORT=18880
ADMIN_PORT=18890
bench_build
# name|producer properties (TOML lines, ';'-separated); the first is floodgate's default.
VARIANTS=(
  "default (linger 5 ms, lz4)|"
  "linger 1 ms|\"linger.ms\" = 1"
  "linger 20 ms|\"linger.ms\" = 20"
  "no compression|\"compression.type\" = \"none\""
  "lz4, batch.size 4 MB|\"batch.size\" = 4000000;\"batch.num.messages\" = 100000"
)

bench_tansu_start "$KAFKA_PORT"
trap bench_cleanup EXIT
bench_topics "127.0.0.1:$KAFKA_PORT" bench.settings bench.settings-direct
KEY=bench-key
config() { # file, properties
  {
    bench_config "$PORT" "$ADMIN_PORT" "127.0.0.1:$KAFKA_PORT"
    echo "[kafka.producer]"
    tr ';' '\n' <<<"$2"
    bench_tenant bench "$KEY" "bench.*"
  } > "$1"
}
results=$OUT/settings-results.txt
: > "$results"
for r in $(seq 1 "$ROUNDS"); do
  for i in "${!VARIANTS[@]}"; do
    name=${VARIANTS[$i]%%|*}
    props=${VARIANTS[$i]#*|}
    config "$OUT/settings-$i.toml" "$props"
    bench_floodgate "$OUT/settings-$i.toml" "$OUT/settings-$i.log" "$ADMIN_PORT"
    kill -0 "$FG" 2>/dev/null || { cat "$OUT/settings-$i.log" >&2; exit 1; }
    "${LOAD[@]}" run --url "http://127.0.0.1:$PORT" --topic bench.settings --tenant "$KEY" \
      --records-per-request 100 --record-size 200 --duration-secs 2 --concurrency 16 --async \
      >/dev/null 2>&1 # warm-up
    c0=$(cpu "$FG")
    "${LOAD[@]}" run --url "http://127.0.0.1:$PORT" --topic bench.settings --tenant "$KEY" \
      --records-per-request 100 --record-size 200 --duration-secs "$SECS" --concurrency 16 --async \
      --json "$OUT/settings-$i-$r.json" >/dev/null 2>&1
    c1=$(cpu "$FG")
    bench_stop "$FG"
    batched=$(json_tenant "$OUT/settings-$i-$r.json" admitted_records_per_sec)
    cpu_rec=$(us_per "$c1-$c0" "$batched*$SECS")
    bench_direct "$OUT/settings-direct-$i-$r.time" --bootstrap "127.0.0.1:$KAFKA_PORT" --topic bench.settings-direct \
      --records "$RECORDS" --record-size 200 --config "$OUT/settings-$i.toml" --json "$OUT/settings-direct-$i-$r.json" >/dev/null 2>&1
    read -r direct p99 < <(python3 -c "import json;d=json.load(open('$OUT/settings-direct-$i-$r.json'));print(d['records_per_sec'],d['p99_ms'])")
    direct_cpu=$(time_us_per "$OUT/settings-direct-$i-$r.time" "$RECORDS")
    echo "round $r | $name | floodgate $batched records/s $cpu_rec us/record | direct $direct records/s $direct_cpu us/record p99 $p99 ms" | tee -a "$results"
  done
done
python3 - "$results" <<'PY' | tee "$OUT/settings-summary.txt"
import re, statistics, sys, collections
runs = collections.defaultdict(lambda: collections.defaultdict(list))
order = []
for line in open(sys.argv[1]):
    m = re.match(r"round \d+ \| (.+?) \| floodgate ([\d.]+) records/s ([\d.]+) us/record \| direct ([\d.]+) records/s ([\d.]+) us/record p99 ([\d.]+) ms", line)
    if not m:
        continue
    name = m.group(1)
    if name not in order:
        order.append(name)
    for k, v in zip(["fg", "fg_cpu", "direct", "direct_cpu", "p99"], m.groups()[1:]):
        runs[name][k].append(float(v))
med = lambda n, k: statistics.median(runs[n][k])
print(f"{'variant':<28} {'floodgate rec/s':>15} {'direct rec/s':>13} {'ratio':>6} {'fg us/rec':>9} {'direct us/rec':>13} {'CPU ratio':>9} {'direct p99 ms':>13}")
for n in order:
    print(f"{n:<28} {med(n,'fg'):>15.0f} {med(n,'direct'):>13.0f} {med(n,'fg')/med(n,'direct'):>6.3f} {med(n,'fg_cpu'):>9.3f} "
          f"{med(n,'direct_cpu'):>13.3f} {med(n,'fg_cpu')/med(n,'direct_cpu'):>9.2f} {med(n,'p99'):>13.1f}")
PY
