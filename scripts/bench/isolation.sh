#!/usr/bin/env bash
# Does a tenant that is refused en masse slow the others down? (issue #16)
# One floodgate on the real broker (Tansu). A steady tenant sends single-record async requests
# at QUIET_RATE (well inside its budget), alone and then beside a flooding tenant that offers
# FLOOD_RATE requests/s against a budget of 100 records/s (so nearly all of its requests are
# refused with 429) — in ROUNDS interleaved pairs of SECS seconds. Prints per round and the
# medians: the steady tenant's admitted requests/s and p99 with vs without the flood, the
# flood's refused/s actually reached, and floodgate's CPU per refused request.
# Load generator on core 0; floodgate and the broker on core 1.
# Knobs: ROUNDS (3), SECS (10), QUIET_RATE (2000), FLOOD_RATE (20000), KAFKA_PORT (19692).
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/bench/lib.sh
ROUNDS=${ROUNDS:-3}
SECS=${SECS:-10}
QUIET_RATE=${QUIET_RATE:-2000}
FLOOD_RATE=${FLOOD_RATE:-20000}
KAFKA_PORT=${KAFKA_PORT:-19692}
PORT=18780
ADMIN_PORT=18790
bench_build

bench_tansu_start "$KAFKA_PORT"
trap bench_cleanup EXIT
bench_topics "127.0.0.1:$KAFKA_PORT" bench.iso

QUIET=quiet-key
FLOOD=flood-key
{
  bench_config "$PORT" "$ADMIN_PORT" "127.0.0.1:$KAFKA_PORT"
  bench_tenant quiet "$QUIET" "bench.*" "records_per_sec = 20000" "records_burst = 20000"
  bench_tenant flood "$FLOOD" "bench.*" "records_per_sec = 100" "records_burst = 100"
} > "$OUT/isolation.toml"
bench_floodgate "$OUT/isolation.toml" "$OUT/isolation.log" "$ADMIN_PORT"
run() { # json name, tenants...
  local name=$1
  shift
  local args=()
  for t in "$@"; do args+=(--tenant "$t"); done
  "${LOAD[@]}" run --url "http://127.0.0.1:$PORT" --topic bench.iso "${args[@]}" \
    --records-per-request 1 --record-size 200 --duration-secs "$SECS" --concurrency 256 \
    --async --json "$OUT/isolation-$name.json" >/dev/null 2>&1
}
# Warm up (connections, metadata, the producer's first batches).
run warmup "$QUIET@$QUIET_RATE"
for r in $(seq 1 "$ROUNDS"); do
  c0=$(cpu "$FG")
  run "alone-$r" "$QUIET@$QUIET_RATE"
  c1=$(cpu "$FG")
  run "flood-$r" "$QUIET@$QUIET_RATE" "$FLOOD@$FLOOD_RATE"
  c2=$(cpu "$FG")
  echo "$c0 $c1 $c2" > "$OUT/isolation-cpu-$r.txt"
done
python3 - "$OUT" "$ROUNDS" "$SECS" <<'PY' | tee "$OUT/isolation-results.txt"
import json, statistics, sys
out, rounds, secs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
med = statistics.median
def tenant(name, prefix):
    return next(t for t in json.load(open(f"{out}/isolation-{name}.json"))["tenants"] if t["tenant"].startswith(prefix))
rows = []
for r in range(1, rounds + 1):
    alone, quiet, flood = tenant(f"alone-{r}", "quiet"), tenant(f"flood-{r}", "quiet"), tenant(f"flood-{r}", "flood")
    c0, c1, c2 = map(float, open(f"{out}/isolation-cpu-{r}.txt").read().split())
    refused = sum(flood["refused_per_sec"].values())
    # CPU the flood added, per refused request (the steady tenant's share measured alone).
    extra_us = ((c2 - c1) - (c1 - c0)) / 100 / (refused * secs) * 1e6 if refused else float("nan")
    rows.append(dict(alone=alone["admitted_per_sec"], with_=quiet["admitted_per_sec"],
                     p99_alone=alone["latency_ms"]["p99"], p99_with=quiet["latency_ms"]["p99"],
                     p50_alone=alone["latency_ms"]["p50"], p50_with=quiet["latency_ms"]["p50"],
                     flood_offered=flood["offered_per_sec"], flood_refused=refused,
                     flood_admitted=flood["admitted_per_sec"], quiet_refused=sum(quiet["refused_per_sec"].values()),
                     cpu_alone=(c1 - c0) / 100 / secs, cpu_flood=(c2 - c1) / 100 / secs, extra_us=extra_us))
    x = rows[-1]
    print(f"round {r}: steady alone {x['alone']:.0f} req/s p50 {x['p50_alone']:.2f} p99 {x['p99_alone']:.2f} ms | "
          f"beside flood {x['with_']:.0f} req/s p50 {x['p50_with']:.2f} p99 {x['p99_with']:.2f} ms (429/s {x['quiet_refused']:.1f}) | "
          f"flood offered {x['flood_offered']:.0f}/s refused {x['flood_refused']:.0f}/s admitted {x['flood_admitted']:.0f}/s | "
          f"floodgate CPU {x['cpu_alone']:.2f} -> {x['cpu_flood']:.2f} cores, {x['extra_us']:.1f} us per refusal")
m = lambda k: med(x[k] for x in rows)
ratio = med(x["with_"] / x["alone"] for x in rows)
dp99 = med(x["p99_with"] - x["p99_alone"] for x in rows)
print(f"medians of {rounds} interleaved rounds:")
print(f"  steady tenant admitted beside the flood / alone: {ratio:.3f}  (target >= 0.95)")
print(f"  steady tenant p99: {m('p99_alone'):.2f} ms alone, {m('p99_with'):.2f} ms beside the flood, "
      f"added {dp99:+.2f} ms  (target <= +1 ms)")
print(f"  flood: {m('flood_offered'):.0f} req/s offered, {m('flood_refused'):.0f} refused/s, "
      f"{m('extra_us'):.1f} us of floodgate CPU per refusal")
PY
