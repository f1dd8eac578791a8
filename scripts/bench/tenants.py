#!/usr/bin/env python3
"""Many tenants on one gateway: for each count, a configuration with that many tenants (a key
and two topic patterns each), `floodgate dev` (release, in-process broker) started on it, and:
start-up time (launch to /readyz 200), RSS at rest, one /metrics scrape (size, time), RSS after
ten scrapes, /admin/status and /admin/tenants (size, time), the status page's time until its
table shows in headless Chromium (when selenium is importable), and a produce request for one
tenant; then with the 100 first tenants busy (a request each), the scrape again; a SIGHUP
reload that changes one tenant (until the admin API shows the change); the same scrape with
`per_tenant = "all"`; and, with a shared registry (`[cluster] shared_registry`), the time the
first replica takes to seed the registry topic and be ready, and a second replica to catch up
with it. Runs against the Kafka at $BOOTSTRAP (scripts/bench/tenants.sh starts Tansu). Prints one line
per count and writes scripts/bench/out/tenants.json.

    scripts/bench/tenants.sh [1000 10000 100000]
"""
import hashlib
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

# tenants.sh sets FLOODGATE_BIN; else cargo's target directory, as lib.sh finds it.
BIN = os.environ.get("FLOODGATE_BIN") or os.path.join(os.environ.get("CARGO_TARGET_DIR", "target"), "release", "floodgate")
PRODUCE, ADMIN = 18680, 18690


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def get(url, token=None, method="GET", body=None, headers=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    if token:
        req.add_header("Authorization", "Bearer " + token)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            payload = r.read()
            status = r.status
    except urllib.error.HTTPError as e:
        payload, status = e.read(), e.code
    return status, payload, time.perf_counter() - started


def config(n, path, extra="", first_rate=100):
    key = "tenant-key-0"
    with open(path, "w") as f:
        f.write('[log]\nlevel = "warn"\n\n[kafka]\nbootstrap_servers = "%s"\n\n%s\n' % (os.environ["BOOTSTRAP"], extra))
        for i in range(n):
            digest = hashlib.sha256(f"tenant-key-{i}".encode()).hexdigest()
            rate = first_rate if i == 0 else 100
            f.write(f'[[tenants]]\nid = "t{i:06d}"\napi_key_sha256 = ["{digest}"]\n'
                    f'topics = ["events.demo", "t{i:06d}.*"]\nrecords_per_sec = {rate}\n\n')
    return key


def launch(path, work, name, port_offset=0, extra_env=None):
    env = dict(os.environ, FLOODGATE_ADMIN_TOKEN="bench:" + TOKEN,
               FLOODGATE__SERVER__LISTEN=f"127.0.0.1:{PRODUCE + port_offset}",
               FLOODGATE__SERVER__ADMIN_LISTEN=f"127.0.0.1:{ADMIN + port_offset}",
               **(extra_env or {}))
    log = open(os.path.join(work, name + ".log"), "w")
    gw = subprocess.Popen([BIN, "--config", path, "run"], stdout=log, stderr=subprocess.STDOUT, env=env)
    return gw, log


def wait_ready(gw, log, admin, launched, limit=600):
    while True:
        try:
            status, _, _ = get(f"http://127.0.0.1:{admin}/readyz")
            if status == 200:
                return round(time.perf_counter() - launched, 2)
        except OSError:
            pass
        if gw.poll() is not None or time.perf_counter() - launched > limit:
            raise SystemExit(f"gateway did not start; see {log.name}")
        time.sleep(0.05)


def stop(*gateways):
    for gw in gateways:
        gw.terminate()
    for gw in gateways:
        try:
            gw.wait(timeout=60)
        except subprocess.TimeoutExpired:
            gw.kill()


TOKEN = secrets.token_hex(16)


def page_time(token):
    try:
        os.environ.setdefault("SE_AVOID_STATS", "true")
        os.environ.setdefault("SE_OFFLINE", "true")
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import WebDriverWait
    except ImportError:
        return None
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1366,768",
                 "--disable-dev-shm-usage", "--no-first-run"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    try:
        driver.set_page_load_timeout(120)
        driver.get(f"http://127.0.0.1:{ADMIN}/ui")
        WebDriverWait(driver, 30).until(lambda d: d.find_element(By.ID, "token").is_displayed())
        driver.find_element(By.ID, "token").send_keys(token)
        started = time.perf_counter()
        driver.find_element(By.CSS_SELECTOR, "#login-form button").click()
        try:
            WebDriverWait(driver, 120, poll_frequency=0.05).until(
                lambda d: len(d.find_elements(By.CSS_SELECTOR, "#tenants tbody tr")) > 0)
        except Exception:
            return float("inf")
        return time.perf_counter() - started
    finally:
        driver.quit()


def admin_write(admin, token, rate):
    """Three PATCHes of one tenant's rate, each a real change, the last to `rate`: the median
    time until answered (seconds)."""
    times = []
    for value in (rate + 2, rate + 1, rate):
        status, body, secs = get(f"http://127.0.0.1:{admin}/admin/tenants/t000000", token,
                                 "PATCH", {"records_per_sec": value})
        if status != 200:
            raise SystemExit(f"admin write: {status} {body[:200]}")
        times.append(secs)
    return round(sorted(times)[1], 3)


def measure(n):
    work = tempfile.mkdtemp(prefix="floodgate-tenants-")
    path = os.path.join(work, "tenants.toml")
    key = config(n, path)
    token = TOKEN
    launched = time.perf_counter()
    gw, log = launch(path, work, "top")
    out = {"tenants": n}
    try:
        out["startup_s"] = wait_ready(gw, log, ADMIN, launched)
        time.sleep(2)
        out["rss_rest_mib"] = round(rss_kib(gw.pid) / 1024, 1)
        status, body, secs = get(f"http://127.0.0.1:{ADMIN}/metrics")
        out["scrape_mb"] = round(len(body) / 1e6, 2)
        out["scrape_s"] = round(secs, 3)
        for _ in range(9):
            get(f"http://127.0.0.1:{ADMIN}/metrics")
        time.sleep(1)
        out["rss_after_scrapes_mib"] = round(rss_kib(gw.pid) / 1024, 1)
        status, body, secs = get(f"http://127.0.0.1:{ADMIN}/admin/status", token)
        out["status_kb"] = round(len(body) / 1e3, 1)
        out["status_s"] = round(secs, 3)
        status, body, secs = get(f"http://127.0.0.1:{ADMIN}/admin/tenants", token)
        out["tenants_list_kb"] = round(len(body) / 1e3, 1)
        out["tenants_list_s"] = round(secs, 3)
        status, _, secs = get(f"http://127.0.0.1:{PRODUCE}/v1/topics/events.demo/records", key,
                              "POST", {"records": [{"value": 1}]})
        out["produce_status"] = status
        # The first 100 tenants busy: each gets series of its own in `top` mode.
        for i in range(min(n, 100)):
            get(f"http://127.0.0.1:{PRODUCE}/v1/topics/events.demo/records?async=true",
                f"tenant-key-{i}", "POST", {"records": [{"value": i}]})
        time.sleep(1.5)
        status, body, secs = get(f"http://127.0.0.1:{ADMIN}/metrics")
        out["scrape_busy_mb"] = round(len(body) / 1e6, 2)
        out["scrape_busy_s"] = round(secs, 3)
        page = page_time(token)
        if page is not None:
            out["page_table_s"] = round(page, 2)
        # SIGHUP: the file changes one tenant's rate; timed until the admin API shows it.
        config(n, path, first_rate=101)
        started = time.perf_counter()
        gw.send_signal(signal.SIGHUP)
        while True:
            _, body, _ = get(f"http://127.0.0.1:{ADMIN}/admin/tenants/t000000", token)
            if json.loads(body).get("records_per_sec") == 101:
                break
            if time.perf_counter() - started > 300:
                raise SystemExit("reload not applied")
            time.sleep(0.01)
        out["reload_s"] = round(time.perf_counter() - started, 2)
        out["admin_write_s"] = admin_write(ADMIN, token, 102)
        out["rss_end_mib"] = round(rss_kib(gw.pid) / 1024, 1)
    finally:
        stop(gw)
    # The same scrape with a series per tenant.
    config(n, path, extra='[metrics]\nper_tenant = "all"\n')
    launched = time.perf_counter()
    gw, log = launch(path, work, "all")
    try:
        wait_ready(gw, log, ADMIN, launched)
        status, body, secs = get(f"http://127.0.0.1:{ADMIN}/metrics")
        out["scrape_all_mb"] = round(len(body) / 1e6, 2)
        out["scrape_all_s"] = round(secs, 3)
    finally:
        stop(gw)
    # A shared registry: the first replica seeds the topic, a second one catches up.
    registry = f"_fg_registry_bench_{n}_{secrets.token_hex(4)}"
    config(n, path, extra=f'[cluster]\nshared_registry = true\nregistry_topic = "{registry}"\n'
                          'registry_secret_env = "FLOODGATE_BENCH_REGISTRY_SECRET"\n')
    secret = {"FLOODGATE_BENCH_REGISTRY_SECRET": secrets.token_hex(16)}
    launched = time.perf_counter()
    first, log = launch(path, work, "seed", 0, secret)
    second = None
    try:
        out["shared_seed_ready_s"] = wait_ready(first, log, ADMIN, launched)
        launched = time.perf_counter()
        second, log2 = launch(path, work, "follow", 1, secret)
        out["shared_catch_up_s"] = wait_ready(second, log2, ADMIN + 1, launched)
        out["shared_rss_mib"] = round(rss_kib(second.pid) / 1024, 1)
        # An admin write on the first replica: answered once it is in the topic and applied
        # there; then the time from that answer until the second replica shows it too.
        out["shared_admin_write_s"] = admin_write(ADMIN, TOKEN, 103)
        started = time.perf_counter()
        while True:
            _, body, _ = get(f"http://127.0.0.1:{ADMIN + 1}/admin/tenants/t000000", TOKEN)
            if json.loads(body).get("records_per_sec") == 103:
                break
            if time.perf_counter() - started > 300:
                raise SystemExit("admin write not seen by the second replica")
            time.sleep(0.01)
        out["shared_admin_write_seen_s"] = round(time.perf_counter() - started, 3)
    finally:
        stop(*[g for g in (first, second) if g is not None])
    return out


def main():
    counts = [int(a) for a in sys.argv[1:]] or [1000, 10000, 100000]
    results = []
    for n in counts:
        r = measure(n)
        print(json.dumps(r), flush=True)
        results.append(r)
    os.makedirs("scripts/bench/out", exist_ok=True)
    with open("scripts/bench/out/tenants.json", "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
