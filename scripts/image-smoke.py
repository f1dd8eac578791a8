#!/usr/bin/env python3
"""The container smoke test's client side (scripts/image-smoke.sh runs it).

    image-smoke.py load --url http://127.0.0.1:PORT --key KEY --topic T --acked FILE \
        --sigterm-at FILE [--threads 8] [--async-threads 4] [--batch 20]
    image-smoke.py readback --broker HOST:PORT --topic T --acked FILE

`load` keeps produce requests in flight from several threads, each record's value a unique id,
until the gateway stops answering (503 while it drains, then connection refused), and writes
every id acknowledged to --acked: answered 200 (sync: Kafka has it) or 202 (the first
--async-threads threads send `?async=true`: accepted, still in librdkafka's queue, which the
drain must flush). It counts the requests acknowledged after the time written in --sigterm-at
(just before the signal is sent): those finished during the drain. It exits 1 if no request was
acknowledged after that time (then the test did not test a drain).

`readback` reads the topic from offset 0 (partitions assigned, no group) until it has been idle
for 5 s, and exits 1 naming any acknowledged id that is not in Kafka.
"""

import argparse
import http.client
import json
import sys
import threading
import time
import urllib.parse


def load(args):
    url = urllib.parse.urlsplit(args.url)
    acked, lock = [], threading.Lock()
    after_sigterm = [0]
    stop = threading.Event()

    def sigterm_time():
        try:
            with open(args.sigterm_at, encoding="utf-8") as f:
                return float(f.read().strip())
        except (OSError, ValueError):
            return None

    def worker(n):
        conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
        asynchronous = n < args.async_threads
        path = f"/v1/topics/{args.topic}/records" + ("?async=true" if asynchronous else "")
        expected = 202 if asynchronous else 200
        i = 0
        while not stop.is_set():
            ids = [f"t{n}-{i + j}" for j in range(args.batch)]
            i += args.batch
            body = json.dumps({"records": [{"value": {"id": x}} for x in ids]})
            try:
                conn.request(
                    "POST",
                    path,
                    body=body,
                    headers={
                        "Authorization": f"Bearer {args.key}",
                        "Content-Type": "application/json",
                    },
                )
                resp = conn.getresponse()
                resp.read()
            except (OSError, http.client.HTTPException):
                return  # the listener closed: the gateway is draining or gone
            done = time.time()
            if resp.status != expected:
                if resp.status == 503:
                    return  # draining: new requests are refused
                print(f"unexpected status {resp.status}", file=sys.stderr)
                stop.set()
                return
            with lock:
                acked.extend(ids)
                sent = sigterm_time()
                if sent is not None and done > sent:
                    after_sigterm[0] += 1

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(args.threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with open(args.acked, "w", encoding="utf-8") as f:
        f.write("\n".join(acked))
    print(
        f"load: {len(acked)} records acknowledged (200 or 202), {after_sigterm[0]} requests "
        "acknowledged after SIGTERM was sent (finished during the drain)"
    )
    if not acked or after_sigterm[0] == 0:
        print("load: no request finished during the drain", file=sys.stderr)
        sys.exit(1)


def readback(args):
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": args.broker,
            "group.id": "floodgate-image-smoke",
            "enable.auto.commit": False,
        }
    )
    meta = consumer.list_topics(args.topic, timeout=10)
    partitions = meta.topics[args.topic].partitions
    consumer.assign([TopicPartition(args.topic, p, OFFSET_BEGINNING) for p in partitions])
    seen = set()
    idle_since = time.time()
    while time.time() - idle_since < 5:
        msg = consumer.poll(0.5)
        if msg is None or msg.error():
            continue
        idle_since = time.time()
        seen.add(json.loads(msg.value())["id"])
    consumer.close()
    with open(args.acked, encoding="utf-8") as f:
        acked = [line for line in f.read().split("\n") if line]
    missing = [x for x in acked if x not in seen]
    print(f"readback: {len(seen)} records in Kafka, {len(acked)} acknowledged, {len(missing)} missing")
    if missing:
        print(f"readback: missing, e.g. {missing[:10]}", file=sys.stderr)
        sys.exit(1)


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("load")
    p.add_argument("--url", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--acked", required=True)
    p.add_argument("--sigterm-at", required=True)
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--async-threads", type=int, default=4)
    p.add_argument("--batch", type=int, default=20)
    p = sub.add_parser("readback")
    p.add_argument("--broker", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--acked", required=True)
    args = parser.parse_args()
    {"load": load, "readback": readback}[args.cmd](args)


if __name__ == "__main__":
    main()
