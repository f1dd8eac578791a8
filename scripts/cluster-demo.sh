#!/usr/bin/env bash
# Cluster mode on one machine: a Redis, a Tansu broker and three floodgate replicas on loopback,
# one tenant ("demo", RATE records/s) spread over the three by floodgate-load, each replica
# offered OFFER requests/s of one record. Prints what each replica admitted per second and the
# total, which stays at the tenant's rate however the load is spread.
#   scripts/cluster-demo.sh            (RATE=1000 OFFER=1500 SECS=10; needs redis-server)
set -euo pipefail
cd "$(dirname "$0")/.."
RATE=${RATE:-1000}
OFFER=${OFFER:-1500}
SECS=${SECS:-10}
KAFKA_PORT=19792
REDIS_PORT=19579
WORK=$(mktemp -d /tmp/floodgate-cluster-demo.XXXXXX)
command -v redis-server >/dev/null || { echo "needs redis-server (apt-get install -y redis-server)" >&2; exit 1; }
[ -x target/release/floodgate ] && [ -x target/release/floodgate-load ] || cargo build --release --workspace --bins

scripts/tansu.sh install
scripts/tansu.sh start "$KAFKA_PORT" "$WORK"
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no > "$WORK/redis.log" 2>&1 &
pids=($!)
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; scripts/tansu.sh stop "$WORK"' EXIT
tansu topic create events.demo --broker "tcp://127.0.0.1:$KAFKA_PORT" --partitions 3 >/dev/null

KEY=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
for i in 1 2 3; do
  cat > "$WORK/replica-$i.toml" <<EOF
[server]
listen = "127.0.0.1:$((18800 + i))"
admin_listen = "127.0.0.1:$((18810 + i))"
[kafka]
bootstrap_servers = "127.0.0.1:$KAFKA_PORT"
[cluster]
redis_url = "redis://127.0.0.1:$REDIS_PORT"
replica_id = "replica-$i"
[log]
level = "warn"
[[tenants]]
id = "demo"
api_key_sha256 = ["$(printf %s "$KEY" | sha256sum | cut -d' ' -f1)"]
topics = ["events.demo"]
records_per_sec = $RATE
records_burst = $RATE
max_buffer_share = 1.0
EOF
  target/release/floodgate --config "$WORK/replica-$i.toml" > "$WORK/replica-$i.log" 2>&1 &
  pids+=($!)
done
for i in 1 2 3; do
  for _ in $(seq 1 100); do (exec 3<>/dev/tcp/127.0.0.1/$((18810 + i))) 2>/dev/null && break; sleep 0.1; done
done
sleep 1
echo "three replicas on 127.0.0.1:18801-18803 share tenant demo ($RATE records/s); offering $OFFER/s to each for $SECS s"
loads=()
for i in 1 2 3; do
  target/release/floodgate-load run --url "http://127.0.0.1:$((18800 + i))" --topic events.demo --async \
    --tenant "$KEY@$OFFER" --duration-secs "$SECS" --csv "$WORK/load-$i.csv" --json "$WORK/load-$i.json" \
    > /dev/null 2>&1 &
  loads+=($!)
done
for p in "${loads[@]}"; do wait "$p"; done
python3 - "$WORK" <<'PY'
import csv, json, sys
work = sys.argv[1]
rows = {}
for i in (1, 2, 3):
    with open(f"{work}/load-{i}.csv") as f:
        for r in csv.DictReader(f):
            sec = int(float(r.get("second") or r.get("t") or 0))
            rows.setdefault(sec, [0, 0, 0])[i - 1] += float(r.get("admitted") or 0)
print("second  replica-1  replica-2  replica-3  total admitted/s")
for sec in sorted(rows):
    a = rows[sec]
    print(f"{sec:6d}  {a[0]:9.0f}  {a[1]:9.0f}  {a[2]:9.0f}  {sum(a):8.0f}")
total = sum(json.load(open(f"{work}/load-{i}.json"))["tenants"][0]["admitted_per_sec"] for i in (1, 2, 3))
print(f"mean total admitted: {total:.0f}/s")
PY
for i in 1 2 3; do
  echo "replica-$i: $(curl -s "http://127.0.0.1:$((18810 + i))/metrics" | grep -E '^floodgate_cluster_(members|degraded) ' | tr '\n' ' ')"
done
