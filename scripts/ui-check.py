#!/usr/bin/env python3
"""The status page in a real browser (Debian's chromium, headless, driven by selenium).

Starts `floodgate dev` on loopback ports, adds a second tenant with a budget of one record a
second, has both tenants send for five seconds with no page open (the second mostly refused),
then stops the refused one, opens /ui with the admin token and checks the rendered page — which
can only know about the refusals from the history the gateway kept by itself: both tenants
listed, the refused one first with a non-zero refusal rate and its reason, the buffer gauge drawn, a lag guard and the adaptive limit shown; no console errors; no request to anywhere
but the admin listener. With --screenshot FILE it also saves the page (docs/status-page.png).

    scripts/ui-check.py [--screenshot docs/status-page.png]
Needs target/debug/floodgate (or FLOODGATE_BIN), chromium, chromium-driver and selenium
(scripts/ui-check.sh makes the venv).
"""
import argparse
import json
import os
import secrets
import subprocess
import sys
import tempfile
import threading
import re
import time
import urllib.error
import urllib.request

os.environ.setdefault("SE_AVOID_STATS", "true")
os.environ.setdefault("SE_OFFLINE", "true")

from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

PRODUCE = int(os.environ.get("UI_PRODUCE_PORT", "18480"))
ADMIN = int(os.environ.get("UI_ADMIN_PORT", "18490"))
BIN = os.environ.get("FLOODGATE_BIN", "target/debug/floodgate")


def request(method, url, token=None, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    if token:
        req.add_header("Authorization", "Bearer " + token)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--screenshot")
    args = parser.parse_args()
    token = secrets.token_hex(16)
    env = dict(os.environ,
               FLOODGATE_ADMIN_TOKEN="ops:" + token,
               FLOODGATE__SERVER__LISTEN=f"127.0.0.1:{PRODUCE}",
               FLOODGATE__SERVER__ADMIN_LISTEN=f"127.0.0.1:{ADMIN}")
    env.pop("FLOODGATE__CLUSTER__REDIS_URL", None)
    work = tempfile.mkdtemp(prefix="floodgate-ui-")
    log = open(os.path.join(work, "out.log"), "w+")
    gateway = subprocess.Popen([BIN, "--config", os.path.join(work, "none.toml"), "dev"],
                               stdout=log, stderr=subprocess.STDOUT, env=env)
    stop = threading.Event()
    try:
        key = None
        for _ in range(400):
            log.seek(0)
            for line in log.read().splitlines():
                if line.startswith("  API key: "):
                    key = line.split(": ", 1)[1].strip()
            if key:
                break
            time.sleep(0.05)
        if not key:
            log.seek(0)
            sys.exit("floodgate dev did not start:\n" + log.read())
        admin = f"http://127.0.0.1:{ADMIN}"
        produce = f"http://127.0.0.1:{PRODUCE}/v1/topics/events.demo/records?async=true"
        status, body = request("PUT", admin + "/admin/tenants/batch-jobs", token,
                               {"topics": ["events.demo"], "records_per_sec": 1, "records_burst": 1,
                                "quotas": [{"window": "day", "records": 100000},
                                           {"window": "hour", "records": 1, "mode": "shadow"}]})
        assert status == 201, (status, body)
        status, body = request("POST", admin + "/admin/tenants/batch-jobs/keys", token)
        assert status == 201, (status, body)
        batch_key = body["api_key"]
        status, body = request("PUT", admin + "/admin/lag-guards/demo-readers", token,
                               {"topics": ["events.demo"], "group": "demo-readers", "max_recovery_s": 60})
        assert status == 201, (status, body)
        status, body = request("PUT", admin + "/admin/adaptive", token,
                               {"enabled": True, "max_records_per_sec": 100000})
        assert status == 200, (status, body)
        # A global month quota, beside whatever global budget the dev gateway has.
        status, body = request("GET", admin + "/admin/global", token)
        assert status == 200, (status, body)
        settings = {k: v for k, v in body.items() if k not in ("live", "quotas") and v is not None}
        settings["quotas"] = [{"window": "month", "records": 10000000}]
        status, body = request("PUT", admin + "/admin/global", token, settings)
        assert status == 200, (status, body)

        refusing = threading.Event()
        refusing.set()

        def traffic():
            record = {"records": [{"value": {"n": 1}}]}
            while not stop.is_set():
                try:
                    request("POST", produce, key, record)
                    if refusing.is_set():
                        request("POST", produce, batch_key, record)
                except OSError:
                    pass  # the gateway is going away at the end
                time.sleep(0.02)

        threading.Thread(target=traffic, daemon=True).start()
        # Five seconds of refusals with no page open, then they stop: what the page shows of
        # them, it shows from the gateway's own history.
        time.sleep(5)
        refusing.clear()

        options = webdriver.ChromeOptions()
        options.binary_location = "/usr/bin/chromium"
        for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1366,768",
                     "--disable-dev-shm-usage", "--no-first-run"):
            options.add_argument(flag)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
        driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
        try:
            driver.get(admin + "/ui")
            WebDriverWait(driver, 10).until(lambda d: d.find_element(By.ID, "token").is_displayed())
            driver.find_element(By.ID, "token").send_keys(token)
            driver.find_element(By.CSS_SELECTOR, "#login-form button").click()

            def rendered(d):
                rows = d.find_elements(By.CSS_SELECTOR, "#tenants tbody tr")
                if len(rows) != 2:
                    return False
                refused = d.find_element(By.CSS_SELECTOR, 'tr[data-tenant="batch-jobs"] td.refused').text
                return refused not in ("", "0", "–")

            WebDriverWait(driver, 15).until(rendered)
            ids = [r.get_attribute("data-tenant") for r in driver.find_elements(By.CSS_SELECTOR, "#tenants tbody tr")]
            assert sorted(ids) == ["batch-jobs", "demo"], ids
            assert ids[0] == "batch-jobs", f"sorted by refusal rate: {ids}"
            reasons = driver.find_element(By.CSS_SELECTOR, 'tr[data-tenant="batch-jobs"]').text
            assert "tenant_records" in reasons, reasons
            # The hour quota in shadow mode: what it would have refused, refusing nothing.
            assert "tenant_quota (shadow)" in reasons, reasons
            # The day quota: what the day admitted of it (the records batch-jobs got through).
            quota = driver.find_element(By.CSS_SELECTOR, 'tr[data-tenant="batch-jobs"] [data-quota="day-records"]').text
            assert re.fullmatch(r"day: [1-9][\d,]* / 100,000 rec", quota), quota
            assert "none" in driver.find_element(By.CSS_SELECTOR, 'tr[data-tenant="demo"]').text
            demo_refused = driver.find_element(By.CSS_SELECTOR, 'tr[data-tenant="demo"] td.refused').text
            assert demo_refused == "0", demo_refused
            # The global month quota: what the month admitted of it, every tenant together.
            month = driver.find_element(By.CSS_SELECTOR, '#global [data-quota="month-records"]').text
            assert re.fullmatch(r"month: [1-9][\d,]* / 10,000,000 rec", month), month
            gauge = driver.find_element(By.ID, "buffer-gauge")
            assert gauge.get_attribute("data-fill") is not None
            assert driver.find_element(By.ID, "buffer-text").text.strip(), "buffer text"
            guards = driver.find_element(By.ID, "lag-guards").text
            # The group never committed: the guard says it cannot read offsets (fail open).
            assert "demo-readers" in guards and "unreadable" in guards, guards
            # The adaptive limit says where it stands and why (a fast broker: at the ceiling).
            # Waited for: on a busy host one slow interval holds it in the dead band (and says
            # so) until the next interval is fast again.
            WebDriverWait(driver, 30).until(
                lambda d: "configured budgets alone decide" in d.find_element(By.ID, "adaptive").text)
            adaptive = driver.find_element(By.ID, "adaptive").text
            assert "ceiling" in adaptive and "configured budgets alone decide" in adaptive, adaptive
            # The signal at its real resolution and the baseline it is judged against, once the
            # agent has read enough deliveries to learn it ("baseline" alone also matched
            # "the path's baseline is still being learned", and a slow start failed the check).
            WebDriverWait(driver, 30).until(
                lambda d: "slow above" in d.find_element(By.ID, "adaptive").text)
            adaptive = driver.find_element(By.ID, "adaptive").text
            # The window is the agent's interval, longer when deliveries are few (a busy host).
            assert "delivery p90" in adaptive and re.search(r"deliveries in [\d,]+ ms", adaptive), adaptive
            assert "judged against" in adaptive and "slow above" in adaptive, adaptive
            # The filter box narrows the table.
            driver.find_element(By.ID, "filter").send_keys("demo")
            WebDriverWait(driver, 5).until(
                lambda d: len(d.find_elements(By.CSS_SELECTOR, "#tenants tbody tr")) == 1)
            driver.find_element(By.ID, "filter").clear()
            driver.execute_script("document.getElementById('filter').dispatchEvent(new Event('input'))")
            WebDriverWait(driver, 5).until(
                lambda d: len(d.find_elements(By.CSS_SELECTOR, "#tenants tbody tr")) == 2)
            if args.screenshot:
                time.sleep(3)  # a few seconds of sparkline
                driver.save_screenshot(args.screenshot)
                print("wrote", args.screenshot)

            errors = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
            assert not errors, errors
            urls = set()
            for entry in driver.get_log("performance"):
                message = json.loads(entry["message"])["message"]
                if message.get("method") == "Network.requestWillBeSent":
                    urls.add(message["params"]["request"]["url"])
            outside = sorted(u for u in urls if not u.startswith(admin + "/"))
            assert not outside, f"requests outside the admin listener: {outside}"
            print(f"ui-check: ok ({len(urls)} distinct requests, all to {admin})")
        finally:
            driver.quit()
    finally:
        stop.set()
        gateway.terminate()
        try:
            gateway.wait(timeout=20)
        except subprocess.TimeoutExpired:
            gateway.kill()


if __name__ == "__main__":
    main()
