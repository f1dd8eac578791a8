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
ROUNDS=${ROUNDS:-2}
SECS=${SECS:-8}
RECORDS=${RECORDS:-500000}
KAFKA_PORT=${KAFKA_PORT:-19792}
PORT=18880
ADMIN_PORT=18890
OUT=scripts/bench/out
mkdir -p "$OUT"
[ -x target/release/floodgate ] && [ -x target/release/floodgate-load ] ||
  cargo build --release --workspace --bins
LOAD=(taskset -c 0 target/release/floodgate-load)
# name|producer properties (TOML lines, ';'-separated); the first is floodgate's default.
VARIANTS=(
  "default (linger 5 ms, lz4)|"
  "linger 1 ms|\"linger.ms\" = 1"
  "linger 20 ms|\"linger.ms\" = 20"
  "no compression|\"compression.type\" = \"none\""
  "lz4, batch.size 4 MB|\"batch.size\" = 4000000;\"batch.num.messages\" = 100000"
)

scripts/tansu.sh install >/dev/null
TANSU_DIR=$(mktemp -d /tmp/floodgate-settings-tansu.XXXXXX)
taskset -c 1 scripts/tansu.sh start "$KAFKA_PORT" "$TANSU_DIR" >/dev/null
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  scripts/tansu.sh stop "$TANSU_DIR" >/dev/null
}
trap cleanup EXIT
tansu topic create bench.settings --broker "tcp://127.0.0.1:$KAFKA_PORT" --partitions 3 >/dev/null
tansu topic create bench.settings-direct --broker "tcp://127.0.0.1:$KAFKA_PORT" --partitions 3 >/dev/null
KEY=bench-key
config() { # file, properties
  {
    echo "[server]"
    echo "listen = \"127.0.0.1:$PORT\""
    echo "admin_listen = \"127.0.0.1:$ADMIN_PORT\""
    echo "[kafka]"
    echo "bootstrap_servers = \"127.0.0.1:$KAFKA_PORT\""
    echo "[kafka.producer]"
    tr ';' '\n' <<<"$2"
    echo "[log]"
    echo "level = \"warn\""
    echo "[[tenants]]"
    echo "id = \"bench\""
    echo "api_key_sha256 = [\"$(printf %s "$KEY" | sha256sum | cut -d' ' -f1)\"]"
    echo "topics = [\"bench.*\"]"
  } > "$1"
}
wait_port() { for _ in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return; sleep 0.1; done; }
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
results=$OUT/settings-results.txt
: > "$results"
for r in $(seq 1 "$ROUNDS"); do
  for i in "${!VARIANTS[@]}"; do
    name=${VARIANTS[$i]%%|*}
    props=${VARIANTS[$i]#*|}
    config "$OUT/settings-$i.toml" "$props"
    taskset -c 1 target/release/floodgate --config "$OUT/settings-$i.toml" > "$OUT/settings-$i.log" 2>&1 &
    fg=$!
    wait_port "$ADMIN_PORT"
    kill -0 "$fg" 2>/dev/null || { cat "$OUT/settings-$i.log" >&2; exit 1; }
    "${LOAD[@]}" run --url "http://127.0.0.1:$PORT" --topic bench.settings --tenant "$KEY" \
      --records-per-request 100 --record-size 200 --duration-secs 2 --concurrency 16 --async \
      >/dev/null 2>&1 # warm-up
    c0=$(cpu "$fg")
    "${LOAD[@]}" run --url "http://127.0.0.1:$PORT" --topic bench.settings --tenant "$KEY" \
      --records-per-request 100 --record-size 200 --duration-secs "$SECS" --concurrency 16 --async \
      --json "$OUT/settings-$i-$r.json" >/dev/null 2>&1
    c1=$(cpu "$fg")
    kill -TERM "$fg"
    wait "$fg" || true
    batched=$(python3 -c "import json;print(json.load(open('$OUT/settings-$i-$r.json'))['tenants'][0]['admitted_records_per_sec'])")
    cpu_rec=$(python3 -c "print(round(($c1-$c0)*1e4/($batched*$SECS),3))")
    /usr/bin/time -f "%U %S" -o "$OUT/settings-direct-$i-$r.time" taskset -c 1 target/release/floodgate-load \
      direct --bootstrap "127.0.0.1:$KAFKA_PORT" --topic bench.settings-direct --records "$RECORDS" \
      --record-size 200 --config "$OUT/settings-$i.toml" --json "$OUT/settings-direct-$i-$r.json" >/dev/null 2>&1
    read -r direct p99 < <(python3 -c "import json;d=json.load(open('$OUT/settings-direct-$i-$r.json'));print(d['records_per_sec'],d['p99_ms'])")
    direct_cpu=$(python3 -c "u,s=open('$OUT/settings-direct-$i-$r.time').read().split()[-2:];print(round((float(u)+float(s))*1e6/$RECORDS,3))")
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
