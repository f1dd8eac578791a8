#!/usr/bin/env python3
"""What a refused request costs floodgate, per refusal reason, against a plain 401: CPU per
request (the process's user + system ticks over the requests) and the RSS it keeps
afterwards. Usage: refusal_cost.py PRODUCE_PORT REGISTRY_PORT FLOODGATE_PID [SCALE]

Cases (the schema step's, #37; each a request shape the review used to attack it):
  401               a bad API key, the body unread
  violation         a small v3 JSONSCHEMA record whose data does not fit (schema cached)
  violation_800k    an 800 KB string against {"type":"integer"} (the error quotes 200 bytes)
  too_costly_check  a 1 MB record against a float enum (46 s of CPU before #37)
  too_costly_regex  a 47 KB schema of 1,000 `\\w{2000+i}` patterns, new each time
  too_costly_memory a schema of 100 `\\w{1500+i}` patterns (each within max_pattern_bytes), new
                    each time: compiled, measured, refused over max_schema_memory_bytes
  foreign_subject   the 47 KB pattern schema under another team's subject (refused uncompiled)
  unknown_version   `schema_version` 999 of the topic's subject (remembered for 5 s)
  registrations     a new raw schema past the tenant's registrations (429 schema_busy)
  budget_429        a new raw schema from a tenant whose budget is spent (429, not registered)
"""
import http.client
import json
import sys
import threading
import time

PORT, REG, PID = (int(x) for x in sys.argv[1:4])
SCALE = float(sys.argv[4]) if len(sys.argv) > 4 else 1.0
TOPIC = "bench.refusal"
TICK = 100.0  # clock ticks per second


def ticks():
    f = open(f"/proc/{PID}/stat").read().rsplit(")", 1)[1].split()
    return int(f[11]) + int(f[12])


def rss_mib():
    for line in open(f"/proc/{PID}/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) / 1024.0
    return 0.0


def compact(v):
    return json.dumps(v, separators=(",", ":"))


def pattern_schema(count, start):
    props = {f"f{j}": {"type": "string", "pattern": "\\w{%d}" % (start + j)} for j in range(count)}
    return compact({"type": "object", "properties": props, "required": ["missing"]})


FLOATS = [i + 0.5 for i in range(28_000)]
ENUM_RECORD = compact({"value": {"type": "JSONSCHEMA",
                                 "schema": compact({"type": "array", "items": {"enum": FLOATS}}),
                                 "data": [FLOATS[-1]] * 100_000 + [-1.5]}})
BIG = "x" * 800_000
COUNTER = [0]


def fresh():
    COUNTER[0] += 1
    return COUNTER[0]


def body(case):
    """(key, path, body) of one request of `case`."""
    path = f"/v3/clusters/c/topics/{TOPIC}/records"
    if case == "401":
        return "wrong-key", path, compact({"value": {"type": "JSON", "data": 1}})
    if case == "violation":
        return "bench-key", path, compact({"value": {"type": "JSONSCHEMA", "schema": '{"type":"integer"}', "data": "x"}})
    if case == "violation_800k":
        return "bench-key", path, compact({"value": {"type": "JSONSCHEMA", "schema": '{"type":"integer"}', "data": BIG}})
    if case == "too_costly_check":
        return "bench-key", path, ENUM_RECORD
    if case == "too_costly_regex":
        return "bench-key", path, compact({"value": {"type": "JSONSCHEMA", "schema": pattern_schema(1000, 2000 + fresh()), "data": {}}})
    if case == "too_costly_memory":
        return "bench-key", path, compact({"value": {"type": "JSONSCHEMA", "schema": pattern_schema(100, 1500 + 10 * fresh()), "data": {}}})
    if case == "foreign_subject":
        return "bench-key", path, compact({"value": {"type": "JSONSCHEMA", "subject": "someone-else-value",
                                                      "schema": pattern_schema(1000, 2000 + fresh()), "data": {}}})
    if case == "unknown_version":
        return "bench-key", path, compact({"value": {"schema_version": 999, "data": {}}})
    if case == "registrations":
        return "regs-key", path, compact({"value": {"type": "JSONSCHEMA", "schema": compact({"title": f"r{fresh()}"}), "data": {}}})
    if case == "budget_429":
        return "spent-key", path, compact({"value": {"type": "JSONSCHEMA", "schema": compact({"title": f"b{fresh()}"}), "data": {}}})
    raise ValueError(case)


SOURCES = [0]


def connect(case):
    """A connection; a 401's comes from a new loopback address every 50 requests, so the
    per-address limit on failed authentications (429 auth_failures) does not answer instead."""
    if case != "401":
        return http.client.HTTPConnection("127.0.0.1", PORT, timeout=120)
    SOURCES[0] += 1
    n = SOURCES[0]
    return http.client.HTTPConnection("127.0.0.1", PORT, timeout=120,
                                      source_address=(f"127.1.{n // 250 % 250 + 1}.{n % 250 + 1}", 0))


def run(case, n, threads=2):
    statuses = {}
    lock = threading.Lock()
    todo = [body(case) for _ in range(n)]

    def worker(part):
        conn = connect(case)
        for i, (key, path, b) in enumerate(part):
            if case == "401" and i % 50 == 49:
                conn.close()
                conn = connect(case)
            try:
                conn.request("POST", path, body=b, headers={"authorization": f"Bearer {key}",
                                                             "content-type": "application/json"})
                r = conn.getresponse()
                r.read()
                s = r.status
            except (http.client.HTTPException, OSError):
                conn.close()
                conn = connect(case)
                s = "error"
            with lock:
                statuses[s] = statuses.get(s, 0) + 1
        conn.close()

    parts = [todo[i::threads] for i in range(threads)]
    r0, t0, w0 = rss_mib(), ticks(), time.time()
    ts = [threading.Thread(target=worker, args=(p,)) for p in parts]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    t1, w1 = ticks(), time.time()
    time.sleep(0.5)
    return {"case": case, "n": n, "statuses": statuses, "cpu_us": (t1 - t0) / TICK * 1e6 / n,
            "rss_mib": rss_mib(), "rss_delta_mib": rss_mib() - r0, "secs": w1 - w0}


CASES = [("401", 20000), ("violation", 4000), ("violation_800k", 60), ("too_costly_check", 10),
         ("too_costly_regex", 60), ("too_costly_memory", 6), ("foreign_subject", 60),
         ("unknown_version", 4000), ("registrations", 2000), ("budget_429", 2000)]

if __name__ == "__main__":
    only = sys.argv[5:] or [c for c, _ in CASES]
    # The spent tenant spends its one record, the registrations tenant its allowance.
    for key in ("spent-key", "regs-key"):
        for _ in range(12):
            k, p, b = body("budget_429" if key == "spent-key" else "registrations")
            c = http.client.HTTPConnection("127.0.0.1", PORT)
            c.request("POST", p, body=b, headers={"authorization": f"Bearer {key}", "content-type": "application/json"})
            c.getresponse().read()
    results = []
    for case, n in CASES:
        if case in only:
            results.append(run(case, max(1, int(n * SCALE))))
    base = next((r["cpu_us"] for r in results if r["case"] == "401"), None)
    print("(a v3 record over ~16 KB is answered as a stream: its refusal is a report under 200)")
    print(f"{'case':<18} {'n':>6} {'CPU us/req':>11} {'x 401':>7} {'RSS MiB':>8} {'dRSS':>7}  statuses")
    for r in results:
        ratio = r["cpu_us"] / base if base else float("nan")
        print(f"{r['case']:<18} {r['n']:>6} {r['cpu_us']:>11.1f} {ratio:>7.1f} {r['rss_mib']:>8.0f} "
              f"{r['rss_delta_mib']:>+7.1f}  {r['statuses']}")
