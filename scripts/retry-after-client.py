"""What a client that honours Retry-After gets of its budget: urllib3's own Retry (PyPI), the
way a Python producer is usually written, sends one-record requests to floodgate's /v1 produce
API back to back for a warm-up (which spends the tenant's burst) and then for the measured
window, and prints what was admitted in the window as JSON:
    {"records": N, "seconds": S, "rate": N / S, "requests_429": M}
Retry(status_forcelist=[429], respect_retry_after_header=True, backoff_factor=0): a 429 is
retried after exactly the Retry-After it names (urllib3 sleeps for it), never sooner.

    python scripts/retry-after-client.py --url URL --key KEY --warmup 1 --seconds 3
"""
import argparse
import json
import time

import urllib3
from urllib3.util.retry import Retry


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--seconds", type=float, default=3.0)
    args = ap.parse_args()

    answers_429 = 0

    class Counting(Retry):
        """urllib3's Retry, counting the 429s it honours (nothing else changed)."""

        def increment(self, *a, response=None, **kw):
            nonlocal answers_429
            if response is not None and response.status == 429:
                answers_429 += 1
            return super().increment(*a, response=response, **kw)

    retry = Counting(
        total=100_000,
        status=100_000,
        status_forcelist=[429],
        allowed_methods=None,  # POST too: floodgate writes nothing for a 429
        respect_retry_after_header=True,
        backoff_factor=0,
        raise_on_status=False,
    )
    http = urllib3.PoolManager(retries=retry, timeout=urllib3.Timeout(total=30))
    body = json.dumps({"records": [{"value": {"n": 1}}]}).encode()
    headers = {"Authorization": f"Bearer {args.key}", "Content-Type": "application/json"}

    start = time.monotonic()
    window_start = start + args.warmup
    window_end = window_start + args.seconds
    admitted = 0
    in_window_429 = 0
    while True:
        before = answers_429
        r = http.request("POST", args.url, body=body, headers=headers)
        done = time.monotonic()
        if done >= window_end:
            break
        if r.status != 200:
            raise SystemExit(f"unexpected answer {r.status}: {r.data[:200]!r}")
        if done >= window_start:
            admitted += 1
            in_window_429 += answers_429 - before
    print(json.dumps({
        "records": admitted,
        "seconds": args.seconds,
        "rate": admitted / args.seconds,
        "requests_429": in_window_429,
    }))


if __name__ == "__main__":
    main()
