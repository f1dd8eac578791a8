#!/usr/bin/env python3
"""Many tenants on one gateway: for each count, a configuration with that many tenants (a key
and two topic patterns each), `floodgate dev` (release, in-process broker) started on it, and:
start-up time (launch to /readyz 200), RSS at rest, one /metrics scrape (size, time), RSS after
ten scrapes, /admin/status and /admin/tenants (size, time), the status page's time until its
table shows in headless Chromium (when selenium is importable), and a produce request for one
tenant. Runs against the Kafka at $BOOTSTRAP (bench/tenants.sh starts Tansu). Prints one line
per count and writes bench/out/tenants.json.

    bench/tenants.sh [1000 10000 100000]
"""
import hashlib
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
import urllib.request

BIN = os.environ.get("FLOODGATE_BIN", "target/release/floodgate")
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


def config(n, path):
    key = "tenant-key-0"
    with open(path, "w") as f:
        f.write('[log]\nlevel = "warn"\n\n[kafka]\nbootstrap_servers = "%s"\n\n' % os.environ["BOOTSTRAP"])
        for i in range(n):
            digest = hashlib.sha256(f"tenant-key-{i}".encode()).hexdigest()
            f.write(f'[[tenants]]\nid = "t{i:06d}"\napi_key_sha256 = ["{digest}"]\n'
                    f'topics = ["events.demo", "t{i:06d}.*"]\nrecords_per_sec = 100\n\n')
    return key


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


def measure(n):
    work = tempfile.mkdtemp(prefix="floodgate-tenants-")
    path = os.path.join(work, "tenants.toml")
    key = config(n, path)
    token = secrets.token_hex(16)
    env = dict(os.environ, FLOODGATE_ADMIN_TOKEN="bench:" + token,
               FLOODGATE__SERVER__LISTEN=f"127.0.0.1:{PRODUCE}",
               FLOODGATE__SERVER__ADMIN_LISTEN=f"127.0.0.1:{ADMIN}")
    log = open(os.path.join(work, "out.log"), "w")
    launched = time.perf_counter()
    gw = subprocess.Popen([BIN, "--config", path, "run"], stdout=log, stderr=subprocess.STDOUT, env=env)
    out = {"tenants": n}
    try:
        while True:
            try:
                status, _, _ = get(f"http://127.0.0.1:{ADMIN}/readyz")
                if status == 200:
                    break
            except OSError:
                pass
            if gw.poll() is not None or time.perf_counter() - launched > 300:
                raise SystemExit(f"gateway did not start ({n} tenants); see {log.name}")
            time.sleep(0.05)
        out["startup_s"] = round(time.perf_counter() - launched, 2)
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
        page = page_time(token)
        if page is not None:
            out["page_table_s"] = round(page, 2)
        out["rss_end_mib"] = round(rss_kib(gw.pid) / 1024, 1)
    finally:
        gw.terminate()
        try:
            gw.wait(timeout=30)
        except subprocess.TimeoutExpired:
            gw.kill()
    return out


def main():
    counts = [int(a) for a in sys.argv[1:]] or [1000, 10000, 100000]
    results = []
    for n in counts:
        r = measure(n)
        print(json.dumps(r), flush=True)
        results.append(r)
    os.makedirs("bench/out", exist_ok=True)
    with open("bench/out/tenants.json", "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
