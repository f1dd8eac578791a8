#!/usr/bin/env bash
# Issue #37: what a refused request costs floodgate, CPU and memory, for each refusal reason of
# the edge (credentials, Idempotency-Key; the schema step's are refusal-cost.sh's),
# against a plain 401 (a bad API key): the rule is that no refusal costs more than 5x a 401
# unless BENCHMARKS.md says why. Each case of the CASES table is N requests over C keep-alive
# connections (scripts/bench/refusal_load.py, core 0), in ROUNDS interleaved rounds; floodgate
# (core 1) is read from /proc: CPU ticks per request, RSS after each case and its peak (VmHWM).
#
# Clients are told apart by X-Forwarded-For (127.0.0.1 is a trusted proxy here): {ip:K} is an
# address that changes every K requests — within the failure allowance (burst 100) — and a
# fixed address is one over its allowance after the warm-up.
#
# Adding a reason: one line in CASES — NAME, the status it must get, and the request as JSON
# (method, path, headers, body; placeholders {n} request number, {d:K} it in K digits,
# {ip:K[:OFF]}, {x:N} N bytes). A case
# needing set-up of its own (a schema, a registry) adds it to the config or the warm-up below.
# Knobs: ROUNDS (3), N (20000), C (32), KAFKA_PORT (19960), PORT (18960), ADMIN_PORT (18961),
# BINARY (the gateway to measure; target/release/floodgate by default).
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/bench/lib.sh
FLOODGATE=${BINARY:-$FLOODGATE}
ROUNDS=${ROUNDS:-3}
N=${N:-20000}
C=${C:-32}
KAFKA_PORT=${KAFKA_PORT:-19960}
PORT=${PORT:-18960}
ADMIN_PORT=${ADMIN_PORT:-18961}
OUT=$OUT/refusal-cost-edge
mkdir -p "$OUT"
bench_build

# An issuer whose JWKS holds one RSA key ("k1"): junk tokens name it, so they reach the
# signature check unless refused before it.
openssl genrsa -out "$OUT/rsa.pem" 2048 2>/dev/null
python3 - "$OUT" <<'PY'
import base64, json, subprocess, sys, time
out = sys.argv[1]
b64 = lambda b: base64.urlsafe_b64encode(b).rstrip(b"=").decode()
mod = subprocess.run(["openssl", "rsa", "-in", f"{out}/rsa.pem", "-noout", "-modulus"],
                     capture_output=True, text=True, check=True).stdout
n = bytes.fromhex(mod.strip().split("=", 1)[1])
json.dump({"keys": [{"kty": "RSA", "kid": "k1", "alg": "RS256", "n": b64(n), "e": "AQAB"}]},
          open(f"{out}/jwks.json", "w"))
head = b64(json.dumps({"alg": "RS256", "kid": "k1", "typ": "JWT"}).encode())
claims = {"iss": "https://idp.bench", "aud": "floodgate", "client_id": "open",
          "sub": "open", "exp": int(time.time()) + 86400}
body = b64(json.dumps(claims).encode())
# A well-formed token with valid claims and a junk signature, each one new ({d:8}: its first
# eight characters are the request's number), so it is never in the cache.
open(f"{out}/junk.jwt", "w").write(f"{head}.{body}.{{d:8}}{b64(bytes(256))[8:]}")
PY
JUNK=$(cat "$OUT/junk.jwt")

bench_tansu_start "$KAFKA_PORT"
trap bench_cleanup EXIT
bench_topics "127.0.0.1:$KAFKA_PORT" bench.refuse
{
  bench_config "$PORT" "$ADMIN_PORT" "127.0.0.1:$KAFKA_PORT"
  echo 'trusted_proxies = ["127.0.0.1/32"]'
  echo '[limits]'
  echo 'max_value_bytes = 1024'
  echo '[[auth.jwt]]'
  echo 'issuer = "https://idp.bench"'
  echo 'audiences = ["floodgate"]'
  echo "jwks_file = \"$PWD/$OUT/jwks.json\""
  bench_tenant open open-key "bench.*"
} > "$OUT/floodgate.toml"
# The [server] lines bench_config writes come first: the trusted_proxies line belongs there.
python3 - "$OUT/floodgate.toml" <<'PY'
import sys
p = sys.argv[1]
lines = open(p).read().split("\n")
trusted = lines.pop(next(i for i, l in enumerate(lines) if l.startswith("trusted_proxies")))
lines.insert(lines.index("[server]") + 1, trusted)
open(p, "w").write("\n".join(lines))
PY
bench_floodgate "$OUT/floodgate.toml" "$OUT/floodgate.log" "$ADMIN_PORT"

V1=/v1/topics/bench.refuse/records
CT='["Content-Type","application/json"]'
KEY_H='["Authorization","Bearer open-key"]'
ONE='{\"records\":[{\"value\":1}]}'
# NAME | status | request
CASES=$(cat <<EOF
401|401|{"method":"POST","path":"$V1","headers":[["Authorization","Bearer not-a-key"],$CT,["X-Forwarded-For","{ip:20}"]],"body":"$ONE"}
429-bad-key|429|{"method":"POST","path":"$V1","headers":[["Authorization","Bearer not-a-key"],$CT,["X-Forwarded-For","192.0.2.1"]],"body":"$ONE"}
429-junk-jwt|429|{"method":"POST","path":"$V1","headers":[["Authorization","Bearer $JUNK"],$CT,["X-Forwarded-For","192.0.2.2"]],"body":"$ONE"}
401-junk-jwt|401|{"method":"POST","path":"$V1","headers":[["Authorization","Bearer $JUNK"],$CT,["X-Forwarded-For","{ip:20:1000000}"]],"body":"$ONE"}
keyed-400-no-records|400|{"method":"POST","path":"$V1","headers":[$KEY_H,$CT,["Idempotency-Key","none-{n}"]],"body":"{\"records\":[]}"}
keyed-404-partition|404|{"method":"POST","path":"$V1","headers":[$KEY_H,$CT,["Idempotency-Key","part-{n}"]],"body":"{\"records\":[{\"value\":1,\"partition\":7}]}"}
keyed-413-record|413|{"method":"POST","path":"$V1","headers":[$KEY_H,$CT,["Idempotency-Key","big-{n}"]],"body":"{\"records\":[{\"value\":\"{x:2000}\"}]}"}
keyed-422-reused|422|{"method":"POST","path":"$V1","headers":[$KEY_H,$CT,["Idempotency-Key","reused"]],"body":"{\"records\":[{\"value\":{n}}]}"}
keyed-400-bad-key|400|{"method":"POST","path":"$V1","headers":[$KEY_H,$CT,["Idempotency-Key","{x:300}"]],"body":"$ONE"}
EOF
)

rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$FG/status"; }
hwm_kib() { awk '/^VmHWM/ {print $2}' "/proc/$FG/status"; }
case_json() { printf '%s\n' "$CASES" | awk -F'|' -v n="$1" '$1 == n {sub(/^[^|]*\|[^|]*\|/, ""); print}'; }
load() { # case name, requests
  taskset -c 0 python3 scripts/bench/refusal_load.py "$(case_json "$1")" "127.0.0.1:$PORT" "$2" "$C"
}

# Warm-up: the fixed addresses spend their allowance, the reused key gets its stored answer.
load 429-bad-key 300 > /dev/null
load 429-junk-jwt 300 > /dev/null
curl -s -o /dev/null -H 'Authorization: Bearer open-key' -H 'Content-Type: application/json' \
  -H 'Idempotency-Key: reused' -d '{"records":[{"value":0}]}' "http://127.0.0.1:$PORT$V1"
load 401 2000 > /dev/null
echo "start rss_kib $(rss_kib)" > "$OUT/results.raw"
names=$(printf '%s\n' "$CASES" | cut -d'|' -f1)
for r in $(seq 1 "$ROUNDS"); do
  for name in $names; do
    c0=$(cpu "$FG")
    seen=$(load "$name" "$N")
    c1=$(cpu "$FG")
    echo "$r $name $c0 $c1 $(rss_kib) $seen" >> "$OUT/results.raw"
  done
done
echo "end hwm_kib $(hwm_kib)" >> "$OUT/results.raw"
curl -s "http://127.0.0.1:$ADMIN_PORT/metrics" \
  | grep -E '^floodgate_(jwt_verifications_total|idempotency_(entries|memory_bytes))' > "$OUT/metrics.txt" || true

python3 - "$OUT/results.raw" "$N" "$CASES" <<'PY' | tee "$OUT/results.txt"
import json, statistics, sys
raw, n, cases = sys.argv[1], int(sys.argv[2]), sys.argv[3]
expected = {l.split("|")[0]: int(l.split("|")[1]) for l in cases.strip().split("\n")}
us, rss, seen = {}, {}, {}
start_rss = end_hwm = 0
for line in open(raw):
    f = line.split(" ", 5)
    if f[0] == "start":
        start_rss = int(f[2]); continue
    if f[0] == "end":
        end_hwm = int(f[2]); continue
    r, name, c0, c1, kib, out = f[0], f[1], int(f[2]), int(f[3]), int(f[4]), json.loads(f[5])
    us.setdefault(name, []).append((c1 - c0) * 1e4 / n)
    rss.setdefault(name, []).append(kib)
    for status, count in out["statuses"].items():
        seen.setdefault(name, {}).setdefault(status, 0)
        seen[name][status] += count
base = statistics.median(us["401"])
print(f"floodgate CPU per refused request, median of {len(us['401'])} interleaved rounds of {n}:")
for name in expected:
    m = statistics.median(us[name])
    answered = seen[name].get(str(expected[name]), 0) / max(1, sum(seen[name].values()))
    print(f"  {name:<22} {m:7.1f} us = {m / base:5.2f}x a 401   RSS after {rss[name][-1] / 1024:6.1f} MiB"
          f"   ({answered:.0%} answered {expected[name]})")
print(f"RSS {start_rss / 1024:.1f} MiB before the rounds, peak {end_hwm / 1024:.1f} MiB")
PY
cat "$OUT/metrics.txt"
