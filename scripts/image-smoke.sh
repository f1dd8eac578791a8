#!/usr/bin/env bash
# The container image's smoke test, against a real Kafka-protocol broker (Tansu):
#   scripts/image-smoke.sh [IMAGE]          (default $FLOODGATE_IMAGE or localhost/floodgate:dev)
# The container runs as Kubernetes runs it (deploy/kubernetes): read-only root filesystem,
# every capability dropped, no new privileges, user 65532, the configuration and the admin
# token mounted read-only (the token as a file: FLOODGATE_ADMIN_TOKEN_FILE), the state file on
# a mounted volume; on the host network, listening on loopback. Then:
# - /readyz answers 200; the admin API, with the token from the file, issues the tenant a key
#   (saved in the state file on the volume: the only place floodgate writes); produce → 200;
# - eight clients keep produce requests in flight, four of them async (202: accepted, still
#   in librdkafka's queue); SIGTERM goes to the container (the entrypoint is floodgate itself):
#   it must exit 0 within the grace period, with requests acknowledged during the drain;
# - every record acknowledged (200 or 202) is read back from Kafka.
# FLOODGATE_SMOKE_SIGNAL=KILL sends SIGKILL instead, to see the test fail (records lost).
# Ports: FLOODGATE_SMOKE_PORT (produce), +1 (admin), +2 (Tansu); default 19500.
set -euo pipefail
cd "$(dirname "$0")/.."

export CONTAINERS_CONF=${CONTAINERS_CONF:-$PWD/scripts/containers.conf}
IMAGE=${1:-${FLOODGATE_IMAGE:-localhost/floodgate:dev}}
PORT=${FLOODGATE_SMOKE_PORT:-19500}
ADMIN_PORT=$((PORT + 1))
KAFKA_PORT=$((PORT + 2))
# The drain's bound (shutdown_timeout_ms below) plus 10 s: as terminationGracePeriodSeconds.
SHUTDOWN_S=20
GRACE=$((SHUTDOWN_S + 10))
TOPIC=smoke.events
VENV=${FLOODGATE_SCHEMA_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/floodgate/schema-venv}
NAME=floodgate-smoke-$PORT

scripts/schema-venv.sh "$VENV" # confluent-kafka, to read the records back
scripts/tansu.sh install

WORK=$(mktemp -d /tmp/floodgate-smoke.XXXXXX)
cleanup() {
  podman rm --force --ignore "$NAME" >/dev/null 2>&1 || true
  scripts/tansu.sh stop "$WORK/tansu"
  rm -rf "$WORK"
}
trap cleanup EXIT

scripts/tansu.sh start "$KAFKA_PORT" "$WORK/tansu"
tansu topic create "$TOPIC" --broker "tcp://127.0.0.1:$KAFKA_PORT" --partitions 3 >/dev/null

mkdir -p "$WORK/config" "$WORK/secrets" "$WORK/state"
ADMIN_TOKEN=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
printf 'smoke:%s\n' "$ADMIN_TOKEN" > "$WORK/secrets/admin-token"
cat > "$WORK/config/floodgate.toml" <<EOF
[server]
listen = "127.0.0.1:$PORT"
admin_listen = "127.0.0.1:$ADMIN_PORT"
shutdown_timeout_ms = $((SHUTDOWN_S * 1000))

[kafka]
bootstrap_servers = "127.0.0.1:$KAFKA_PORT"
delivery_timeout_ms = 10000

# Records wait 100 ms in librdkafka before they are sent: every request is still in flight
# for that long, so SIGTERM always finds some.
[kafka.producer]
"linger.ms" = 100

[admin]
token_env = "FLOODGATE_ADMIN_TOKEN"
state_file = "/var/lib/floodgate/tenants.state.json"

[[tenants]]
id = "smoke"
api_key_sha256 = []
topics = ["smoke.*"]
records_per_sec = 1000000
records_burst = 2000000
bytes_per_sec = 1073741824
bytes_burst = 2147483648
EOF
# Readable by the container's user (65532), writable only where floodgate writes.
chmod 755 "$WORK/config" "$WORK/secrets"
chmod 644 "$WORK/config/floodgate.toml" "$WORK/secrets/admin-token"
chown 65532:65532 "$WORK/state"

podman run --detach --name "$NAME" --network=host \
  --read-only --cap-drop=ALL --security-opt=no-new-privileges --user 65532:65532 \
  -v "$WORK/config:/etc/floodgate:ro" \
  -v "$WORK/secrets:/var/run/secrets/floodgate:ro" \
  -v "$WORK/state:/var/lib/floodgate" \
  -e FLOODGATE_ADMIN_TOKEN_FILE=/var/run/secrets/floodgate/admin-token \
  "$IMAGE" >/dev/null

fail() {
  echo "image-smoke: $*" >&2
  podman logs --tail 30 "$NAME" >&2 || true
  exit 1
}

ready=""
for _ in $(seq 1 150); do
  if [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$ADMIN_PORT/readyz")" = 200 ]; then
    ready=yes
    break
  fi
  [ "$(podman inspect --format '{{.State.Running}}' "$NAME")" = true ] || fail "the container stopped"
  sleep 0.2
done
[ -n "$ready" ] || fail "/readyz did not answer 200 within 30 s"
echo "image-smoke: /readyz 200"

KEY=$(curl -sf -X POST -H "Authorization: Bearer $ADMIN_TOKEN" \
  "http://127.0.0.1:$ADMIN_PORT/admin/tenants/smoke/keys" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["api_key"])') ||
  fail "the admin API refused the token from FLOODGATE_ADMIN_TOKEN_FILE"
[ -s "$WORK/state/tenants.state.json" ] || fail "no state file on the mounted volume"
echo "image-smoke: admin token read from its file; key issued and saved on the volume"

status=$(curl -s -o "$WORK/produce.json" -w '%{http_code}' -H "Authorization: Bearer $KEY" \
  -H 'Content-Type: application/json' -d '{"records":[{"value":{"id":"first"}}]}' \
  "http://127.0.0.1:$PORT/v1/topics/$TOPIC/records")
[ "$status" = 200 ] || fail "produce answered $status: $(cat "$WORK/produce.json")"
echo "image-smoke: produce 200 $(cat "$WORK/produce.json")"

"$VENV/bin/python" scripts/image-smoke.py load --url "http://127.0.0.1:$PORT" --key "$KEY" \
  --topic "$TOPIC" --acked "$WORK/acked" --sigterm-at "$WORK/sigterm-at" &
LOAD=$!
sleep 3
python3 -c 'import time; print(time.time())' > "$WORK/sigterm-at"
podman kill --signal "${FLOODGATE_SMOKE_SIGNAL:-TERM}" "$NAME" >/dev/null
started=$SECONDS
code=$(timeout "$GRACE" podman wait "$NAME") || fail "still running ${GRACE} s after SIGTERM"
took=$((SECONDS - started))
load_ok=yes
wait "$LOAD" || load_ok=""
{ echo first; cat "$WORK/acked"; } > "$WORK/acked-all"
if [ "$code" != 0 ] || [ -z "$load_ok" ]; then
  # What was lost, before failing.
  "$VENV/bin/python" scripts/image-smoke.py readback --broker "127.0.0.1:$KAFKA_PORT" \
    --topic "$TOPIC" --acked "$WORK/acked-all" || true
  [ -n "$load_ok" ] || fail "no request was acknowledged during the drain"
  fail "exit code $code after SIGTERM (1: records Kafka had not confirmed)"
fi
echo "image-smoke: SIGTERM -> exit 0 in ${took} s (grace ${GRACE} s)"
podman logs "$NAME" 2>&1 | grep -E 'shutdown' | tail -3 || true

"$VENV/bin/python" scripts/image-smoke.py readback --broker "127.0.0.1:$KAFKA_PORT" \
  --topic "$TOPIC" --acked "$WORK/acked-all"
echo "image-smoke: passed"
