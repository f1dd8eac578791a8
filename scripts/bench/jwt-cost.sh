#!/usr/bin/env bash
# Issue #32: floodgate's CPU per admitted request with an API key beside a cached JWT (RS256
# and ES256 are verified once, then found by the token's SHA-256), in ROUNDS interleaved rounds
# of SECS seconds each (64 connections, closed loop, single-record async /v1 requests).
# Keys from a jwks_file; tokens signed with openssl. Knobs: ROUNDS (3), SECS (6), KAFKA
# (an existing broker, 127.0.0.1:19292). Load generator on core 0, floodgate on core 1.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/bench/lib.sh
ROUNDS=${ROUNDS:-3}
SECS=${SECS:-6}
KAFKA=${KAFKA:-127.0.0.1:19292}
PORT=18641
ADMIN_PORT=18642
OUT=$OUT/jwt-cost
mkdir -p "$OUT"
bench_build
bench_topics "$KAFKA" bench32.cost 2>/dev/null || true

openssl genrsa -out "$OUT/rsa.pem" 2048 2>/dev/null
openssl ecparam -name prime256v1 -genkey -noout -out "$OUT/ec.sec1" 2>/dev/null
openssl pkcs8 -topk8 -nocrypt -in "$OUT/ec.sec1" -out "$OUT/ec.pem"
python3 - "$OUT" <<'PY'
import base64, json, subprocess, sys, time
out = sys.argv[1]
b64 = lambda b: base64.urlsafe_b64encode(b).rstrip(b"=").decode()
mod = subprocess.run(["openssl", "rsa", "-in", f"{out}/rsa.pem", "-noout", "-modulus"], capture_output=True, text=True, check=True).stdout
n = bytes.fromhex(mod.strip().split("=", 1)[1])
pub = subprocess.run(["openssl", "ec", "-in", f"{out}/ec.pem", "-pubout", "-outform", "DER"], capture_output=True, check=True).stdout
point = pub[-65:]
json.dump({"keys": [{"kty": "RSA", "kid": "rsa", "alg": "RS256", "n": b64(n), "e": "AQAB"},
                    {"kty": "EC", "crv": "P-256", "kid": "ec", "x": b64(point[1:33]), "y": b64(point[33:])}]},
          open(f"{out}/jwks.json", "w"))
now = int(time.time())
claims = {"iss": "https://idp.bench", "aud": "floodgate", "client_id": "open", "iat": now,
          "nbf": now, "exp": now + 3600, "scope": "produce", "sub": "service-account-orders"}
def der_to_raw(sig):  # ECDSA DER (r, s) -> 64 bytes
    i = 4; rl = sig[3]; r = sig[i:i + rl]; i += rl + 2; s = sig[i:]
    return r[-32:].rjust(32, b"\0") + s[-32:].rjust(32, b"\0")
for kid, alg, key in [("rsa", "RS256", "rsa.pem"), ("ec", "ES256", "ec.pem")]:
    signed = b64(json.dumps({"alg": alg, "kid": kid, "typ": "JWT"}).encode()) + "." + b64(json.dumps(claims).encode())
    sig = subprocess.run(["openssl", "dgst", "-sha256", "-sign", f"{out}/{key}"], input=signed.encode(), capture_output=True, check=True).stdout
    if alg == "ES256": sig = der_to_raw(sig)
    open(f"{out}/{alg}.jwt", "w").write(signed + "." + b64(sig))
PY

{
  bench_config "$PORT" "$ADMIN_PORT" "$KAFKA"
  echo "[[auth.jwt]]"
  echo "issuer = \"https://idp.bench\""
  echo "audiences = [\"floodgate\"]"
  echo "jwks_file = \"$PWD/$OUT/jwks.json\""
  bench_tenant open open-key-0123456789 "bench32.*"
} > "$OUT/floodgate.toml"
trap bench_cleanup EXIT
bench_floodgate "$OUT/floodgate.toml" "$OUT/floodgate.log" "$ADMIN_PORT"

run() { # name, credential
  bench_cpu_run "$1" "$FG" "$OUT/cpu.txt" --url "http://127.0.0.1:$PORT" --topic bench32.cost \
    --tenant "$2" --records-per-request 1 --record-size 200 --duration-secs "$SECS" \
    --concurrency 64 --async --json "$OUT/$1.json"
}
: > "$OUT/cpu.txt"
RS=$(cat "$OUT/RS256.jwt")
ES=$(cat "$OUT/ES256.jwt")
run warmup open-key-0123456789
for r in $(seq 1 "$ROUNDS"); do
  run "key-$r" open-key-0123456789
  run "rs256-$r" "$RS"
  run "es256-$r" "$ES"
done
curl -s "http://127.0.0.1:$ADMIN_PORT/metrics" | grep -E '^floodgate_(authentications_total|jwt_verifications_total)' > "$OUT/metrics.txt"
python3 - "$OUT" "$ROUNDS" <<'PY' | tee "$OUT/results.txt"
import statistics, sys
sys.path.insert(0, "scripts/bench")
from rounds import cpu_per_request
out, rounds = sys.argv[1], int(sys.argv[2])
paths = ["key", "rs256", "es256"]
us, tenants = cpu_per_request(f"{out}/cpu.txt", out + "/{}-{}.json", paths, rounds, "offered_per_sec")
rate = {p: [t["offered_per_sec"] for t in tenants[p]] for p in paths}
for r in range(rounds):
    print(f"round {r + 1}: " + ", ".join(f"{p} {us[p][r]:.2f} us ({rate[p][r]:.0f} req/s)" for p in paths))
med = statistics.median
base = med(us["key"])
print(f"medians of {rounds} interleaved rounds, floodgate CPU per admitted request:")
for p in paths:
    print(f"  {p:>5}: {med(us[p]):6.2f} us = {med(us[p]) / base:.3f}x the API key's  ({med(rate[p]):.0f} req/s)")
PY
cat "$OUT/metrics.txt"
