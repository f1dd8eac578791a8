#!/usr/bin/env bash
# Instructions per request, counted by valgrind's callgrind (not seconds: the same figure for
# the same binary and load whatever else the machine runs, so two builds compare on a busy
# host where scripts/bench/ab.sh's CPU times spread by 5-10 %):
#   scripts/bench/instructions.sh NAME=BINARY[+TOML] [NAME=BINARY[+TOML] ...]
# (+TOML: lines added to that run's tenant, as in ab.sh.)
# Per round and per build: floodgate under callgrind against one Tansu, 500 single-record
# async requests to warm it, its counters zeroed, then N more (4 keep-alive connections,
# 200-byte records, as ab.sh's single-record run), and a dump. Prints per request: all the
# process's user-space instructions (librdkafka's threads included, which move with how
# records fall into batches) and those of the tokio workers (the request's path: HTTP, the
# pipeline, the answer). Knobs: ROUNDS (2), N (3000), KAFKA_PORT (19593), IC_PORT (18690;
# admin IC_PORT + 1), API (v1: `/v1` with async=true; v3: one Confluent v3 record a request,
# answered once it is delivered). Dumps in scripts/bench/out/callgrind-NAME-ROUND.*
# (`callgrind_annotate` them).
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/bench/lib.sh
ROUNDS=${ROUNDS:-2}
N=${N:-3000}
KAFKA_PORT=${KAFKA_PORT:-19593}
PORT=${IC_PORT:-18690}
ADMIN_PORT=$((PORT + 1))
KEY=bench-key
API=${API:-v1}
command -v valgrind >/dev/null || { echo "valgrind is needed (Debian: apt-get install valgrind)"; exit 1; }
bench_tansu_start "$KAFKA_PORT"
trap bench_cleanup EXIT
bench_topics "127.0.0.1:$KAFKA_PORT" bench.ab
{
  bench_config "$PORT" "$ADMIN_PORT" "127.0.0.1:$KAFKA_PORT"
  bench_tenant bench "$KEY" "bench.*"
} > "$OUT/instructions.toml"
send() { # N requests over 4 keep-alive connections; fails on any answer but 2xx
  python3 - "$PORT" "$1" "$KEY" "$API" <<'PY'
import http.client, json, sys, threading
port, n, key, api = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
if api == "v3":
    path = "/v3/clusters/bench/topics/bench.ab/records"
    body = json.dumps({"value": {"type": "STRING", "data": "x" * 200}}).encode()
else:
    path = "/v1/topics/bench.ab/records?async=true"
    body = json.dumps({"records": [{"value": "x" * 200}]}).encode()
head = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
bad = []
def client(k):
    c = http.client.HTTPConnection("127.0.0.1", port)
    for _ in range(k):
        c.request("POST", path, body, head)
        r = c.getresponse()
        answer = r.read()
        if r.status >= 300 or (api == "v3" and b'"error_code":200' not in answer):
            bad.append(r.status)
threads = [threading.Thread(target=client, args=(n // 4,)) for _ in range(4)]
[t.start() for t in threads]
[t.join() for t in threads]
sys.exit(f"{len(bad)} answers not 2xx: {bad[:5]}" if bad else 0)
PY
}
results=$OUT/instructions-results.txt
: > "$results"
for r in $(seq 1 "$ROUNDS"); do
  for spec in "$@"; do
    bench_spec "$spec" "$OUT/instructions.toml" instructions
    name=$SPEC_NAME bin=$SPEC_BIN config=$SPEC_CONFIG
    dump=$OUT/callgrind-$name-$r
    rm -f "$dump".*
    valgrind --tool=callgrind --callgrind-out-file="$dump.%p" "$bin" --config "$config" \
      > "$OUT/instructions-$name.log" 2>&1 &
    FG=$!
    PIDS+=("$FG")
    # Under callgrind it starts some 50 times slower: up to a minute.
    for _ in $(seq 1 300); do (exec 3<>"/dev/tcp/127.0.0.1/$ADMIN_PORT") 2>/dev/null && break; sleep 0.2; done
    send 500
    callgrind_control -z "$FG" >/dev/null
    send "$N"
    callgrind_control -d "$FG" >/dev/null
    bench_stop "$FG"
    part=$(ls "$dump".*.1)
    total=$(sed -n 's/^summary: //p' "$part")
    workers=$(callgrind_annotate --threshold=100 --auto=no --inclusive=yes "$part" \
      | awk '/multi_thread::worker::run \[/ && !n++ {gsub(",", "", $1); print $1}')
    echo "round $r $name: total $((total / N)) workers $((workers / N)) instructions per request" | tee -a "$results"
  done
done
python3 - "$results" <<'PY'
import collections, re, statistics, sys
runs = collections.defaultdict(lambda: collections.defaultdict(list))
for line in open(sys.argv[1]):
    m = re.match(r"round \d+ (\S+): total (\d+) workers (\d+)", line)
    if m:
        runs[m.group(1)]["total"].append(int(m.group(2)))
        runs[m.group(1)]["workers"].append(int(m.group(3)))
first = None
for name, r in runs.items():
    t, w = statistics.median(r["total"]), statistics.median(r["workers"])
    first = first or (t, w)
    print(f"{name}: medians {t:.0f} instructions per request in all ({t / first[0]:.3f} of the first build), "
          f"{w:.0f} on the tokio workers ({w / first[1]:.3f}); rounds: workers {r['workers']}")
PY
