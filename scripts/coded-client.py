#!/usr/bin/env python3
"""Posts content-coded bodies to floodgate the way Python producers do, with the plain clients.

Each body is compressed by the client's own library and sent with `Content-Encoding`, the
header set by hand (requests and urllib3 never compress a request body themselves, so this is
what an exporter or a script posting gzip does):

  1. requests, gzip (Python's gzip module), one body with a Content-Length: /v1 JSON;
  2. requests, gzip streamed from a generator (zlib with the gzip wrapper), so sent chunked:
     /v1 NDJSON;
  3. urllib3, zstd (PyPI's zstandard), one body: /v1 JSON;
  4. urllib3, zstd streamed (a zstandard compressobj), chunked: a Confluent v3 stream of
     records, answered with one report per record.

Prints one JSON line per record sent, {"key": ..., "value": ...} (the bytes Kafka must hold, as
text), for the caller to compare with what it reads back. Exits 1 if any answer is not a
success, printing it.

    coded-client.py --url http://127.0.0.1:PORT --key KEY --topic T
"""

import argparse
import gzip
import json
import sys
import zlib

import requests
import urllib3
import zstandard


def records(case, n):
    out = []
    for i in range(n):
        value = json.dumps(
            {"case": case, "i": i, "msg": "héllo from python " + "words " * (10 + i)},
            ensure_ascii=False,
        )
        out.append((f"py-{case}-{i}", value))
    return out


def v1_json(recs):
    items = ",".join(
        '{"key":%s,"value":%s}' % (json.dumps(k), v) for k, v in recs
    )
    return ('{"records":[%s]}' % items).encode()


def pieces(data, n=3):
    step = len(data) // n + 1
    for i in range(0, len(data), step):
        yield data[i : i + step]


def check(what, status, text):
    if status not in (200, 202):
        print(f"{what}: {status} {text}", file=sys.stderr)
        sys.exit(1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--topic", required=True)
    a = p.parse_args()
    auth = {"Authorization": f"Bearer {a.key}"}
    v1 = f"{a.url}/v1/topics/{a.topic}/records"
    sent = []

    recs = records("requests-gzip", 5)
    r = requests.post(
        v1,
        data=gzip.compress(v1_json(recs)),
        headers={**auth, "Content-Type": "application/json", "Content-Encoding": "gzip"},
        timeout=30,
    )
    check("requests gzip", r.status_code, r.text)
    sent += recs

    recs = records("requests-gzip-chunked", 5)
    ndjson = "".join('{"key":%s,"value":%s}\n' % (json.dumps(k), v) for k, v in recs).encode()

    def gzip_stream():
        c = zlib.compressobj(wbits=31)  # 16 + 15: the gzip wrapper
        for piece in pieces(ndjson):
            out = c.compress(piece)
            if out:
                yield out
        yield c.flush()

    r = requests.post(
        v1,
        data=gzip_stream(),
        headers={**auth, "Content-Type": "application/x-ndjson", "Content-Encoding": "gzip"},
        timeout=30,
    )
    check("requests gzip chunked", r.status_code, r.text)
    sent += recs

    http = urllib3.PoolManager()
    recs = records("urllib3-zstd", 5)
    r = http.request(
        "POST",
        v1,
        body=zstandard.ZstdCompressor().compress(v1_json(recs)),
        headers={**auth, "Content-Type": "application/json", "Content-Encoding": "zstd"},
        timeout=30,
    )
    check("urllib3 zstd", r.status, r.data.decode(errors="replace"))
    sent += recs

    recs = records("urllib3-zstd-stream", 5)
    v3 = "".join(
        json.dumps(
            {"key": {"type": "STRING", "data": k}, "value": {"type": "STRING", "data": v}},
            ensure_ascii=False,
        )
        for k, v in recs
    ).encode()

    def zstd_stream():
        c = zstandard.ZstdCompressor().compressobj()
        for piece in pieces(v3):
            out = c.compress(piece)
            if out:
                yield out
        yield c.flush()

    r = http.request(
        "POST",
        f"{a.url}/v3/clusters/c/topics/{a.topic}/records",
        body=zstd_stream(),
        chunked=True,
        headers={**auth, "Content-Type": "application/json", "Content-Encoding": "zstd"},
        timeout=30,
    )
    text = r.data.decode(errors="replace")
    reports = [json.loads(line) for line in text.split("\r\n") if line.strip()]
    check("urllib3 zstd stream", r.status, text)
    if len(reports) != len(recs) or any(rep.get("error_code") != 200 for rep in reports):
        print(f"urllib3 zstd stream: reports {text}", file=sys.stderr)
        sys.exit(1)
    sent += recs

    for k, v in sent:
        print(json.dumps({"key": k, "value": v}, ensure_ascii=False))


if __name__ == "__main__":
    main()
