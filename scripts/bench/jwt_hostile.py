#!/usr/bin/env python3
"""Hostile pass on a release floodgate with JWT issuers (issue #32): forged tokens, kid
confusion, a JWKS server that hangs, drips, answers garbage or an endless body, a flood of
unknown kids (the refetch must stay throttled), a token of tenant A on tenant B's topic.
Signs with openssl (no PyJWT needed). Usage: scripts/bench/jwt_hostile.py (builds nothing;
expects $FLOODGATE_BIN, else ${CARGO_TARGET_DIR:-target}/release/floodgate, and a Kafka at
$KAFKA, default 127.0.0.1:19292). Loopback only."""
import base64, hashlib, http.server, json, os, socketserver, subprocess, sys, tempfile, threading, time
import urllib.request, urllib.error
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# cargo's target directory as cargo finds it (CARGO_TARGET_DIR, else ./target), as lib.sh does.
TARGET = os.path.join(ROOT, os.environ.get("CARGO_TARGET_DIR", "target"))
BIN = os.environ.get("FLOODGATE_BIN", os.path.join(TARGET, "release", "floodgate"))
KAFKA = os.environ.get("KAFKA", "127.0.0.1:19292")
PORT, ADMIN, IDP = 18632, 18633, 18634
ISS, AUD = "https://idp.hostile.test", "floodgate"
MIN_REFETCH = 2
WORK = tempfile.mkdtemp(prefix="fg-jwt-hostile-", dir=TARGET)

def b64(b): return base64.urlsafe_b64encode(b).rstrip(b"=").decode()

def rsa_key(name):
    path = os.path.join(WORK, name + ".pem")
    subprocess.run(["openssl", "genrsa", "-out", path, "2048"], check=True, capture_output=True)
    mod = subprocess.run(["openssl", "rsa", "-in", path, "-noout", "-modulus"], check=True, capture_output=True, text=True).stdout
    n = bytes.fromhex(mod.strip().split("=", 1)[1])
    pub = subprocess.run(["openssl", "rsa", "-in", path, "-pubout"], check=True, capture_output=True).stdout
    return path, {"kty": "RSA", "n": b64(n), "e": "AQAB"}, pub

def sign(path, header, claims, raw_sig=None):
    signed = b64(json.dumps(header).encode()) + "." + b64(json.dumps(claims).encode())
    if raw_sig is not None:
        return signed + "." + raw_sig
    sig = subprocess.run(["openssl", "dgst", "-sha256", "-sign", path], input=signed.encode(), check=True, capture_output=True).stdout
    return signed + "." + b64(sig)

def hs256(secret, header, claims):
    import hmac
    signed = b64(json.dumps(header).encode()) + "." + b64(json.dumps(claims).encode())
    return signed + "." + b64(hmac.new(secret, signed.encode(), hashlib.sha256).digest())

class Idp:
    mode = "ok"; doc = b""; fetches = 0; lock = threading.Lock()

class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def do_GET(self):
        with Idp.lock:
            Idp.fetches += 1
        mode = Idp.mode
        if mode == "hang":
            time.sleep(30); return
        if mode == "drip":  # a valid start, one byte a second
            self.send_response(200); self.send_header("content-type", "application/json")
            self.send_header("content-length", "100000"); self.end_headers()
            try:
                for _ in range(30):
                    self.wfile.write(b" "); self.wfile.flush(); time.sleep(1)
            except Exception: pass
            return
        if mode == "endless":  # chunked, no length, never ends on its own
            self.send_response(200); self.send_header("content-type", "application/json")
            self.send_header("transfer-encoding", "chunked"); self.end_headers()
            chunk = b"x" * 65536
            try:
                head = b'{"keys":[],"p":"'
                self.wfile.write(b"%x\r\n%s\r\n" % (len(head), head))
                for _ in range(100000):
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            except Exception: pass
            return
        body = {"ok": Idp.doc, "garbage": b"\x00\xff<html>oops", "empty": b'{"keys":[]}',
                "huge": b'{"keys":[],"p":"' + b"x" * (4 << 20) + b'"}',
                "redirect": b""}[mode]
        if mode == "redirect":
            self.send_response(302); self.send_header("location", "http://127.0.0.1:1/evil"); self.send_header("content-length", "0"); self.end_headers(); return
        self.send_response(200); self.send_header("content-type", "application/json")
        self.send_header("cache-control", "max-age=300"); self.send_header("content-length", str(len(body))); self.end_headers()
        try: self.wfile.write(body)
        except Exception: pass

class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True; allow_reuse_address = True

def post(topic, token, timeout=10):
    req = urllib.request.Request(f"http://127.0.0.1:{PORT}/v1/topics/{topic}/records?async=true",
        data=b'{"records":[{"value":1}]}', method="POST",
        headers={"content-type": "application/json", "authorization": "Bearer " + token})
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"{}"), time.monotonic() - t0
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}"), time.monotonic() - t0

def rss(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS"): return int(line.split()[1]) // 1024
def cpu_s(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")

findings = []
def check(what, cond, detail=""):
    print(("ok   " if cond else "FAIL ") + what + (f" — {detail}" if detail else ""))
    if not cond: findings.append(what)

def main():
    key, jwk, pub = rsa_key("idp"); jwk["kid"] = "k1"; jwk["alg"] = "RS256"
    attacker, _, _ = rsa_key("attacker")
    Idp.doc = json.dumps({"keys": [jwk]}).encode()
    srv = Server(("127.0.0.1", IDP), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    for t in ["hostile32.a", "hostile32.b"]:
        subprocess.run(["tansu", "topic", "create", t, "--broker", f"tcp://{KAFKA}", "--partitions", "1"], capture_output=True)
    digest = lambda k: hashlib.sha256(k.encode()).hexdigest()
    cfg = os.path.join(WORK, "fg.toml")
    open(cfg, "w").write(f"""
[server]
listen = "127.0.0.1:{PORT}"
admin_listen = "127.0.0.1:{ADMIN}"
[kafka]
bootstrap_servers = "{KAFKA}"
[log]
level = "warn"
[[auth.jwt]]
issuer = "{ISS}"
audiences = ["{AUD}"]
jwks_url = "http://127.0.0.1:{IDP}/jwks"
min_refetch_s = {MIN_REFETCH}
refresh_s = 300
fetch_timeout_ms = 1000
map = {{ "svc-a" = "tenant-a", "svc-b" = "tenant-b" }}
[[tenants]]
id = "tenant-a"
topics = ["hostile32.a"]
[[tenants]]
id = "tenant-b"
api_key_sha256 = ["{digest('b-key-0123456789')}"]
topics = ["hostile32.b"]
""")
    log = open(os.path.join(WORK, "fg.log"), "w")
    fg = subprocess.Popen([BIN, "--config", cfg], stdout=log, stderr=log)
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{ADMIN}/healthz", timeout=1); break
            except Exception: time.sleep(0.1)
        now = int(time.time())
        claims = lambda sub="svc-a", **kw: {"iss": ISS, "aud": AUD, "client_id": sub, "iat": now, "nbf": now - 5, "exp": now + 600, **kw}
        good = sign(key, {"alg": "RS256", "kid": "k1"}, claims())
        st, body, _ = post("hostile32.a", good)
        check("valid token admitted", st == 202, f"{st} {body}")
        rss0 = rss(fg.pid)

        print("-- forged tokens")
        pem = pub
        forged = {
            "alg none": b64(b'{"alg":"none","kid":"k1"}') + "." + b64(json.dumps(claims()).encode()) + ".",
            "alg None": b64(b'{"alg":"None","kid":"k1"}') + "." + b64(json.dumps(claims()).encode()) + ".",
            "HS256 with the public PEM": hs256(pem, {"alg": "HS256", "kid": "k1"}, claims()),
            "HS256 with the JWK n": hs256(base64.urlsafe_b64decode(jwk["n"] + "=="), {"alg": "HS256", "kid": "k1"}, claims()),
            "attacker key, same kid": sign(attacker, {"alg": "RS256", "kid": "k1"}, claims()),
            "attacker key, no kid": sign(attacker, {"alg": "RS256"}, claims()),
            "empty signature": sign(key, {"alg": "RS256", "kid": "k1"}, claims(), raw_sig=""),
            "tampered tenant": good.split(".")[0] + "." + b64(json.dumps(claims("svc-b")).encode()) + "." + good.split(".")[2],
            "alg as list": sign(key, {"alg": ["RS256"], "kid": "k1"}, claims()),
            "jku injection": sign(attacker, {"alg": "RS256", "kid": "k1", "jku": "http://127.0.0.1:1/evil"}, claims()),
            "jwk in header": sign(attacker, {"alg": "RS256", "jwk": {"kty": "RSA", "n": "AQAB", "e": "AQAB"}}, claims()),
            "kid path traversal": sign(attacker, {"alg": "RS256", "kid": "../../../../dev/null"}, claims()),
            "crit": sign(key, {"alg": "RS256", "kid": "k1", "crit": ["exp"]}, claims()),
            "aud array w/o ours": sign(key, {"alg": "RS256", "kid": "k1"}, claims(aud=["x", "y"])),
            "exp string": sign(key, {"alg": "RS256", "kid": "k1"}, {**claims(), "exp": str(now + 600)}),
            "iss with trailing slash": sign(key, {"alg": "RS256", "kid": "k1"}, {**claims(), "iss": ISS + "/"}),
            "16 KiB + 1": "a" * 8000 + "." + "b" * 8000 + "." + "c" * 385,
            "JWE-shaped": "a.b.c.d.e",
        }
        for what, tok in forged.items():
            st, body, _ = post("hostile32.a", tok)
            check(f"forged: {what} → 401", st == 401, f"{st} {body.get('error')}")
        fetches = Idp.fetches
        time.sleep(MIN_REFETCH + 0.2)
        st, body, _ = post("hostile32.a", sign(key, {"alg": "ES256", "kid": "k1"}, claims()))
        check("kid confusion (RSA kid, ES256 alg) → 401 without a fetch", st == 401 and Idp.fetches == fetches, f"{st} {body.get('error')} fetches {Idp.fetches - fetches}")

        print("-- tenant A's token on tenant B's topic")
        st, body, _ = post("hostile32.b", good)
        check("token of tenant-a on hostile32.b → 403 forbidden_topic", st == 403 and body.get("error") == "forbidden_topic", f"{st} {body}")
        st, body, _ = post("hostile32.b", "b-key-0123456789")
        check("tenant-b's key on its topic", st == 202, f"{st} {body}")

        print("-- flood of unknown kids (8 threads, 6 s)")
        f0, t0 = Idp.fetches, time.monotonic()
        c0 = cpu_s(fg.pid)
        n = [0]
        def flood(i):
            j = 0
            while time.monotonic() - t0 < 6:
                tok = sign(attacker, {"alg": "RS256", "kid": f"bogus-{i}-{j}"}, claims())
                post("hostile32.a", tok); n[0] += 1; j += 1
        with ThreadPoolExecutor(8) as ex: list(ex.map(flood, range(8)))
        spent = time.monotonic() - t0
        allowed = int(spent / MIN_REFETCH) + 1
        check(f"{n[0]} unknown kids in {spent:.1f} s → {Idp.fetches - f0} fetches (at most {allowed})", Idp.fetches - f0 <= allowed)
        print(f"     gateway CPU for the flood: {cpu_s(fg.pid) - c0:.2f} s")

        print("-- hostile JWKS answers (a fresh, uncached token of the held key must keep working)")
        for mode, bound in [("garbage", 2), ("empty", 2), ("huge", 2), ("endless", 2.5), ("redirect", 2), ("drip", 2.5), ("hang", 2.5)]:
            Idp.mode = mode
            time.sleep(MIN_REFETCH + 0.2)
            f0 = Idp.fetches
            st, body, took = post("hostile32.a", sign(key, {"alg": "RS256", "kid": "rotated-" + mode}, claims()))
            check(f"JWKS {mode}: unknown kid → 503 jwks_unavailable within {bound} s", st == 503 and took < bound and Idp.fetches - f0 == 1, f"{st} {body.get('error')} {took:.2f} s fetches {Idp.fetches - f0}")
            st, body, took = post("hostile32.a", sign(key, {"alg": "RS256", "kid": "k1"}, claims(jti=mode)))
            check(f"JWKS {mode}: held key still verifies a new token", st == 202 and took < 1, f"{st} {body.get('error')} {took:.2f}")
        Idp.mode = "hang"
        time.sleep(MIN_REFETCH + 0.2)
        f0, t0 = Idp.fetches, time.monotonic()
        with ThreadPoolExecutor(32) as ex:
            res = list(ex.map(lambda i: post("hostile32.a", sign(attacker, {"alg": "RS256", "kid": f"h{i}"}, claims()))[0], range(64)))
        check(f"64 unknown kids during a hang: one fetch, all 503, {time.monotonic() - t0:.2f} s", Idp.fetches - f0 == 1 and set(res) == {503}, f"fetches {Idp.fetches - f0} {set(res)}")
        Idp.mode = "ok"
        check(f"RSS bounded: {rss0} → {rss(fg.pid)} MiB", rss(fg.pid) < rss0 + 64)
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{ADMIN}/metrics").read()
        pt = subprocess.run(["promtool", "check", "metrics"], input=metrics, capture_output=True)
        check("promtool check metrics", pt.returncode == 0, (pt.stdout + pt.stderr).decode()[:500])
        for line in metrics.decode().splitlines():
            if line.startswith(("floodgate_authentications_total", "floodgate_jwks_fetches_total", "floodgate_jwt_")):
                print("     " + line)
        logtext = open(os.path.join(WORK, "fg.log")).read()
        check("no token in the log", good.split(".")[2][:40] not in logtext and "bogus-" not in logtext)
    finally:
        fg.terminate(); fg.wait(10); srv.shutdown()
    print("findings:", findings or "none")
    return 1 if findings else 0

if __name__ == "__main__":
    sys.exit(main())
