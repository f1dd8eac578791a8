#!/usr/bin/env bash
# Does an open status page cost the produce path anything? `floodgate dev` (release, in-process
# broker), single-record async requests from floodgate-load for SECS seconds, alternately with
# no page open and with PAGES simulated pages (each asks GET /admin/status once a second, as
# the page does), ROUNDS interleaved rounds; requests/s per run and the medians.
#   scripts/bench/status.sh        (ROUNDS=3 SECS=5 PAGES=100)
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/bench/lib.sh
ROUNDS=${ROUNDS:-3}
SECS=${SECS:-5}
PAGES=${PAGES:-100}
PORT=18580
ADMIN_PORT=18590
PIN=() # floodgate floats; the load generator is on core 0
bench_build
TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
trap bench_cleanup EXIT
FLOODGATE_ADMIN_TOKEN="bench:$TOKEN" FLOODGATE__SERVER__LISTEN="127.0.0.1:$PORT" \
FLOODGATE__SERVER__ADMIN_LISTEN="127.0.0.1:$ADMIN_PORT" FLOODGATE__LOG__LEVEL=warn \
  bench_dev "$OUT/status-dev.log"
# The demo tenant's budget would cap the load: lift it, so the figures measure the gateway.
curl -sf -X PATCH -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
  -d '{"records_per_sec":null,"bytes_per_sec":null}' "http://127.0.0.1:$ADMIN_PORT/admin/tenants/demo" > /dev/null
sleep 1

pages() { # run PAGES pollers for SECS+2 seconds
  python3 - "$PAGES" "$((SECS + 2))" "http://127.0.0.1:$ADMIN_PORT/admin/status" "$TOKEN" <<'PY'
import sys, threading, time, urllib.request
n, secs, url, token = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3], sys.argv[4]
end = time.time() + secs
done = [0]
def page(offset):
    time.sleep(offset)
    while time.time() < end:
        req = urllib.request.Request(url, headers={"Authorization": "Bearer " + token})
        with urllib.request.urlopen(req, timeout=5) as r:
            r.read()
        done[0] += 1
        time.sleep(1)
threads = [threading.Thread(target=page, args=(i / n,)) for i in range(n)]
for t in threads: t.start()
for t in threads: t.join()
print(f"{done[0]} status snapshots served", file=sys.stderr)
PY
}

results="$OUT/status-results.txt"
: > "$results"
for round in $(seq 1 "$ROUNDS"); do
  for mode in none pages; do
    poller=""
    if [ "$mode" = pages ]; then pages & poller=$!; sleep 1; fi
    "${LOAD[@]}" run --url "http://127.0.0.1:$PORT" --topic events.demo \
      --async --tenant "$KEY" --records-per-request 1 --duration-secs "$SECS" --concurrency 64 \
      --json "$OUT/status-$mode.json" > /dev/null 2>&1
    [ -n "$poller" ] && wait "$poller"
    python3 -c "import json,sys; t=json.load(open('$OUT/status-$mode.json'))['tenants'][0]; print($round, '$mode', t['admitted_per_sec'], t['latency_ms']['p99'])" >> "$results"
  done
done
cat "$results"
python3 - "$results" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
none = [float(r[2]) for r in rows if r[1] == "none"]
pages = [float(r[2]) for r in rows if r[1] == "pages"]
p99n = [float(r[3]) for r in rows if r[1] == "none"]
p99p = [float(r[3]) for r in rows if r[1] == "pages"]
print(f"no page:   median {statistics.median(none):.0f} req/s, p99 {statistics.median(p99n):.2f} ms")
print(f"100 pages: median {statistics.median(pages):.0f} req/s, p99 {statistics.median(p99p):.2f} ms")
print(f"ratio per round: {', '.join(f'{b / a:.3f}' for a, b in zip(none, pages))}; median {statistics.median([b / a for a, b in zip(none, pages)]):.3f}")
PY
