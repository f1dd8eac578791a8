#!/usr/bin/env bash
# End-to-end benchmark, in one run on one machine, against the real broker (Tansu):
#   (a) the limit: records produced straight into Kafka with librdkafka and floodgate's settings;
#   (b) the same records through floodgate: batched (100/request) and single-record, async and
#       sync, and sync latency at half of the single-record capacity;
#   (c) the HTTP limit: the same single-record requests to a do-nothing axum handler;
#   then the burst-and-drain scenario (mock broker with added RTT) as CSV and PNG.
# Load generator on core 0; floodgate, the broker, the direct producer and the null server on
# core 1 (the machine has two cores).
# Output: a table on stdout, scripts/bench/out/*.json, scripts/bench/out/burst-drain.csv, docs/burst-drain.png,
# and the slow-broker / slow-consumer pairs (see scripts/bench/pressure.sh).
#
# Knobs: RECORDS (direct run size), SIZE (value bytes), SECS (seconds per HTTP run).
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/bench/lib.sh

RECORDS=${RECORDS:-1000000}
SIZE=${SIZE:-200}
SECS=${SECS:-10}
KAFKA_PORT=${KAFKA_PORT:-19392}
PORT=18080
ADMIN_PORT=18090
NULL_PORT=18081
mkdir -p docs

command -v taskset >/dev/null || { echo "taskset (util-linux) is required" >&2; exit 1; }
[ -x /usr/bin/time ] || apt-get install -y -qq time
[ -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || apt-get install -y -qq fonts-dejavu-core

cargo build --release --workspace --bins

bench_tansu_start "$KAFKA_PORT"
trap bench_cleanup EXIT
bench_topics "127.0.0.1:$KAFKA_PORT" bench.direct bench.direct-paced bench.http

KEY=bench-key
{
  bench_config "$PORT" "$ADMIN_PORT" "127.0.0.1:$KAFKA_PORT"
  bench_tenant bench "$KEY" "bench.*"
} > "$OUT/floodgate.toml"

# The direct producer runs where floodgate will run (core 1, beside the broker), so both get the
# same CPU for their Kafka client; only the HTTP load generator lives on core 0.
direct() { # json name, extra args... (its CPU seconds, user and system, go to $OUT/NAME.time)
  local name=$1
  shift
  bench_direct "$OUT/$name.time" --bootstrap "127.0.0.1:$KAFKA_PORT" \
    --record-size "$SIZE" --config "$OUT/floodgate.toml" --json "$OUT/$name.json" "$@"
}

bench_floodgate "$OUT/floodgate.toml" "$OUT/floodgate.log" "$ADMIN_PORT"
bench_null "$NULL_PORT"

run() { # name, port, records per request, concurrency, extra args...
  local name=$1 port=$2 rpr=$3 conc=$4
  shift 4
  "${LOAD[@]}" run --url "http://127.0.0.1:$port" --topic bench.http --tenant "$KEY" \
    --records-per-request "$rpr" --record-size "$SIZE" --duration-secs "$SECS" \
    --concurrency "$conc" --json "$OUT/$name.json" "$@" 2>/dev/null
}

# The host is shared and noisy: the runs that make the two throughput ratios are repeated,
# interleaved, and the medians compared.
REPEAT=${REPEAT:-3}
for i in $(seq 1 "$REPEAT"); do
  echo "== round $i/$REPEAT: (a) direct librdkafka, $RECORDS records of $SIZE B"
  direct "direct-$i" --topic bench.direct --records "$RECORDS"
  echo "== round $i/$REPEAT: (b) floodgate batched async, single-record async; (c) null handler, $SECS s each"
  c0=$(cpu "$FG")
  run "batched-async-$i" "$PORT" 100 16 --async
  c1=$(cpu "$FG")
  run "single-async-$i" "$PORT" 1 64 --async
  c2=$(cpu "$FG")
  n0=$(cpu "$NULL")
  run "null-$i" "$NULL_PORT" 1 64
  n1=$(cpu "$NULL")
  echo "$c0 $c1 $c2 $n0 $n1" > "$OUT/cpu-round-$i.txt"
  [ "$i" -eq 1 ] && echo "$c1 $c2" > "$OUT/cpu-single-async.txt"
done
echo "== (b) sync"
run batched-sync "$PORT" 100 32
run single-sync "$PORT" 1 64
half=$(python3 -c "print(round(float('$(json_tenant "$OUT/single-sync.json" admitted_per_sec)')/2))")
echo "== sync latency at half of single-record sync capacity ($half requests/s)"
"${LOAD[@]}" run --url "http://127.0.0.1:$PORT" --topic bench.http --tenant "$KEY@$half" \
  --records-per-request 1 --record-size "$SIZE" --duration-secs "$SECS" --concurrency 256 \
  --json "$OUT/half-sync.json" 2>/dev/null
direct direct-paced --topic bench.direct-paced --records "$((half * SECS))" --rate "$half"
rss_kb=$(awk '/VmHWM/{print $2}' "/proc/$FG/status")
bench_stop "$FG"
bench_stop "$NULL"

echo "== (d) budgets under overload: drift at 10x, isolation at 100x"
NOISY=noisy-key
QUIET=quiet-key
{
  bench_config "$PORT" "$ADMIN_PORT" "127.0.0.1:$KAFKA_PORT"
  bench_tenant noisy "$NOISY" "bench.*" "records_per_sec = 100" "records_burst = 100"
  bench_tenant quiet "$QUIET" "bench.*" "records_per_sec = 1000" "records_burst = 1000"
} > "$OUT/budgets.toml"
bench_floodgate "$OUT/budgets.toml" "$OUT/floodgate-budgets.log" "$ADMIN_PORT"
budget_run() { # name, tenants...
  local name=$1
  shift
  local args=()
  for t in "$@"; do args+=(--tenant "$t"); done
  "${LOAD[@]}" run --url "http://127.0.0.1:$PORT" --topic bench.http "${args[@]}" \
    --records-per-request 1 --record-size "$SIZE" --duration-secs 10 --concurrency 256 \
    --json "$OUT/$name.json" 2>/dev/null
}
budget_run quiet-alone "$QUIET@100"
sleep 1.2 # the quiet tenant's bucket refills between runs
budget_run drift-10x "$NOISY@1000"
sleep 1.2
budget_run isolation-100x "$QUIET@100" "$NOISY@10000"
sleep 1.2
c0=$(cpu "$FG")
budget_run refused-only "$NOISY@5000"
echo "$c0 $(cpu "$FG")" > "$OUT/cpu-refused-only.txt"
bench_stop "$FG"

echo "== (e) a refused flood beside a steady tenant (scripts/bench/isolation.sh)"
scripts/bench/isolation.sh > /dev/null

echo "== burst and drain (mock broker, 250 ms RTT)"
"${LOAD[@]}" burst-drain --csv "$OUT/burst-drain.csv" --png docs/burst-drain.png 2>/dev/null
echo "== slow broker and slow consumer (without / with adaptive admission and a lag guard)"
"${LOAD[@]}" slow-broker --csv "$OUT/slow-broker.csv" --png docs/slow-broker.png 2>/dev/null
"${LOAD[@]}" slow-consumer --csv "$OUT/slow-consumer.csv" --png docs/slow-consumer.png 2>/dev/null

python3 - "$OUT" "$rss_kb" "$REPEAT" "$RECORDS" <<'PY'
import json, statistics, sys
out, rss_kb, repeat, records = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
j = lambda n: json.load(open(f"{out}/{n}.json"))
t = lambda n: j(n)["tenants"][0]
med = lambda xs: statistics.median(xs)
rounds = range(1, repeat + 1)
direct = [j(f"direct-{i}") for i in rounds]
batched = [t(f"batched-async-{i}") for i in rounds]
single = [t(f"single-async-{i}") for i in rounds]
null = [t(f"null-{i}") for i in rounds]
paced = j("direct-paced")
print(f"\nmedians of {repeat} interleaved rounds (per-round values in brackets):")
print(f"{'run':<40} {'records/s':>11} {'requests/s':>11} {'p99 ms':>8}")
def row(label, recs, reqs, p99):
    print(f"{label:<40} {recs:>11.0f} {reqs:>11} {p99:>8.2f}")
row("direct librdkafka (limit)", med(d["records_per_sec"] for d in direct), "-", med(d["p99_ms"] for d in direct))
row("floodgate batched 100, async", med(b["admitted_records_per_sec"] for b in batched),
    f"{med(b['admitted_per_sec'] for b in batched):.0f}", med(b["latency_ms"]["p99"] for b in batched))
for name, label in [("batched-sync", "floodgate batched 100, sync"), ("single-sync", "floodgate single-record, sync")]:
    x = t(name)
    row(label, x["admitted_records_per_sec"], f"{x['admitted_per_sec']:.0f}", x["latency_ms"]["p99"])
row("floodgate single-record, async", med(x["admitted_records_per_sec"] for x in single),
    f"{med(x['admitted_per_sec'] for x in single):.0f}", med(x["latency_ms"]["p99"] for x in single))
row("do-nothing axum handler (HTTP limit)", med(x["admitted_records_per_sec"] for x in null),
    f"{med(x['admitted_per_sec'] for x in null):.0f}", med(x["latency_ms"]["p99"] for x in null))
print()
ratio_b = med(b["admitted_records_per_sec"] for b in batched) / med(d["records_per_sec"] for d in direct)
per_b = [round(b["admitted_records_per_sec"] / d["records_per_sec"], 2) for b, d in zip(batched, direct)]
print(f"batched async / direct librdkafka:        {ratio_b:.3f} {per_b}  (target >= 0.90)")
ratio_s = med(x["admitted_per_sec"] for x in single) / med(x["admitted_per_sec"] for x in null)
ratio_s = round(ratio_s, 3)
per_s = [round(a["admitted_per_sec"] / b["admitted_per_sec"], 2) for a, b in zip(single, null)]
print(f"single-record async req/s / null handler: {ratio_s:.2f} {per_s}  (target >= 0.75)")
# CPU per unit, from /proc around each run (floodgate, the null handler) and /usr/bin/time (direct).
cpu_rec, cpu_req, null_req, direct_rec = [], [], [], []
for i, b, s_, n, d in zip(rounds, batched, single, null, direct):
    c0, c1, c2, n0, n1 = map(float, open(f"{out}/cpu-round-{i}.txt").read().split())
    secs = j(f"batched-async-{i}")["duration_secs"]
    cpu_rec.append((c1 - c0) / 100 / (b["admitted_records_per_sec"] * secs) * 1e6)
    cpu_req.append((c2 - c1) / 100 / (s_["admitted_per_sec"] * j(f"single-async-{i}")["duration_secs"]) * 1e6)
    null_req.append((n1 - n0) / 100 / (n["admitted_per_sec"] * j(f"null-{i}")["duration_secs"]) * 1e6)
    u, sy = map(float, open(f"{out}/direct-{i}.time").read().split()[-2:])
    direct_rec.append((u + sy) / records * 1e6)
print(f"CPU per batched record: floodgate {med(cpu_rec):.3f} us, direct {med(direct_rec):.3f} us = "
      f"{med(a / b for a, b in zip(cpu_rec, direct_rec)):.2f}x  (target <= 1.11)")
print(f"CPU per single-record request: floodgate {med(cpu_req):.2f} us, null handler {med(null_req):.2f} us = "
      f"{med(a / b for a, b in zip(cpu_req, null_req)):.2f}x  (target <= 1.33)")
ss = single[0]
half = t("half-sync")
print()
print(f"sync p99 at {half['offered_per_sec']:.0f} req/s: {half['latency_ms']['p99']:.2f} ms vs direct paced p99 {paced['p99_ms']:.2f} ms: "
      f"added {half['latency_ms']['p99']-paced['p99_ms']:.2f} ms  (target <= 2 ms)")
print(f"floodgate peak RSS over the runs: {rss_kb/1024:.0f} MiB")
drift = t("drift-10x")
admitted = drift["admitted_per_sec"] * 10
print(f"noisy tenant at 10x (100 rec/s, burst 100) for 10 s: admitted {admitted:.0f} records, "
      f"bound 1100, {100*(admitted-1100)/1100:+.1f}%  (target within 2%)")
alone, iso = t("quiet-alone"), j("isolation-100x")["tenants"]
quiet = next(x for x in iso if x["tenant"].startswith("quiet"))
noisy = next(x for x in iso if x["tenant"].startswith("noisy"))
print(f"quiet tenant alone: p50 {alone['latency_ms']['p50']:.2f} ms, p99 {alone['latency_ms']['p99']:.2f} ms, "
      f"429/s {sum(alone['refused_per_sec'].values()):.1f}")
print(f"quiet tenant beside noisy at 100x ({noisy['offered_per_sec']:.0f} req/s offered, "
      f"{sum(noisy['refused_per_sec'].values()):.0f}/s refused): p50 {quiet['latency_ms']['p50']:.2f} ms, "
      f"p99 {quiet['latency_ms']['p99']:.2f} ms, 429/s {sum(quiet['refused_per_sec'].values()):.1f}")
def cpu_per_request(name, requests):
    a, b = map(float, open(f"{out}/cpu-{name}.txt").read().split())
    return (b - a) / 100 / requests * 1e6
admitted_us = cpu_per_request("single-async", ss["admitted_per_sec"] * j("single-async-1")["duration_secs"])
ro = t("refused-only")
refused_us = cpu_per_request("refused-only", ro["offered_per_sec"] * 10)
print(f"floodgate CPU per request, end to end (HTTP included): admitted single-record {admitted_us:.1f} us, "
      f"refused {refused_us:.1f} us ({100*refused_us/admitted_us:.0f}%)")
PY
echo
echo "(e) a tenant refused at 20,000 requests/s beside a steady tenant (scripts/bench/isolation.sh):"
tail -n 3 "$OUT/isolation-results.txt"
