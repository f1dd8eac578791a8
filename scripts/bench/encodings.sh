#!/usr/bin/env bash
# What a content coding costs end to end (#43): floodgate's CPU per record with each
# Content-Encoding, on the same records — 100 per request, 200-byte log-like values (varied
# numbers, levels, paths: what compresses as real records do), 16 connections, async — in
# ROUNDS interleaved rounds of SECS seconds each, against one Tansu. Also the bytes on the wire
# per record, from floodgate's own counters. Load generator on core 0; floodgate and the broker
# on core 1. Prints each run and the medians; results in scripts/bench/out/encodings-*.
# Knobs: ROUNDS (3), SECS (8), PORT (18980), ADMIN_PORT (18990), KAFKA_PORT (19892), ENCODINGS ("identity gzip deflate zstd snappy").
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/bench/lib.sh
ROUNDS=${ROUNDS:-3}
SECS=${SECS:-8}
KAFKA_PORT=${KAFKA_PORT:-19892}
ENCODINGS=${ENCODINGS:-identity gzip deflate zstd snappy}
PORT=${PORT:-18980}
ADMIN_PORT=${ADMIN_PORT:-18990}
bench_build

bench_tansu_start "$KAFKA_PORT"
trap bench_cleanup EXIT
bench_topics "127.0.0.1:$KAFKA_PORT" bench.codings
KEY=bench-key
{
  bench_config "$PORT" "$ADMIN_PORT" "127.0.0.1:$KAFKA_PORT"
  bench_tenant bench "$KEY" "bench.*"
} > "$OUT/encodings.toml"
bench_floodgate "$OUT/encodings.toml" "$OUT/encodings.log" "$ADMIN_PORT"

# Bytes each coding's decoder took in so far (0 for identity: nothing is counted).
received() {
  curl -s "http://127.0.0.1:$ADMIN_PORT/metrics" |
    awk -v e="$1" '$1 == "floodgate_body_encoded_received_bytes_total{encoding=\"" e "\"}" {v = $2} END {print v + 0}'
}
results=$OUT/encodings-results.txt
: > "$results"
run() { # encoding, json name
  "${LOAD[@]}" run --url "http://127.0.0.1:$PORT" --topic bench.codings --tenant "$KEY" \
    --records-per-request 100 --record-size 200 --log-values --content-encoding "$1" \
    --duration-secs "$SECS" --concurrency 16 --async --json "$OUT/encodings-$2.json" \
    >/dev/null 2>&1
}
run gzip warmup
for r in $(seq 1 "$ROUNDS"); do
  for enc in $ENCODINGS; do
    w0=$(received "$enc")
    c0=$(cpu "$FG")
    run "$enc" "$enc-$r"
    c1=$(cpu "$FG")
    w1=$(received "$enc")
    rate=$(json_tenant "$OUT/encodings-$enc-$r.json" admitted_per_sec)
    records=$(python3 -c "print($rate*100*$SECS)")
    wire=$(python3 -c "print(round(($w1-$w0)/max($records,1),1))")
    echo "round $r $enc: $(python3 -c "print(round($rate*100))") records/s, $(us_per "$c1-$c0" "$records") us CPU/record, $wire wire bytes/record" |
      tee -a "$results"
  done
done
python3 - "$results" <<'PY'
import collections, re, statistics, sys
runs = collections.defaultdict(lambda: collections.defaultdict(list))
for line in open(sys.argv[1]):
    m = re.match(r"round \d+ (\S+): ([\d.]+) records/s, ([\d.]+) us CPU/record, ([\d.]+) wire", line)
    if m:
        for k, v in zip(["rate", "cpu", "wire"], m.groups()[1:]):
            runs[m.group(1)][k].append(float(v))
med = lambda n, k: statistics.median(runs[n][k])
base = med("identity", "cpu") if "identity" in runs else None
print(f"medians of {len(next(iter(runs.values()))['rate'])} interleaved rounds (100 records of 200 bytes per request, 16 connections, async):")
for n in runs:
    extra = f" = {med(n, 'cpu') / base:.2f}x identity's" if base else ""
    wire = f", {med(n, 'wire'):.1f} bytes/record on the wire (inflated by floodgate)" if n != "identity" else ""
    print(f"  {n}: {med(n, 'rate'):.0f} records/s, {med(n, 'cpu'):.3f} us CPU/record{extra}{wire}")
PY
