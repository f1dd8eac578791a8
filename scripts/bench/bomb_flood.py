#!/usr/bin/env python3
"""N compression bombs at once, for scripts/bench/bombs.sh: each 1 GiB inflated, coded as KIND
(gzip-zeros, zstd-zeros, gzip-spaces, zstd-spaces; spaces: 1 GiB of JSON white space inside
{"records":[...]}, valid to its last byte). The bombs are made once (streamed: never 1 GiB in
memory) and cached in DIR. Each upload sends its bomb with a Content-Length, in 64 KiB writes,
and reads the answer (the server may answer before the body is all sent). Prints one line:
how many uploads got which status, the bomb's size, and how long the flood took.

    bomb_flood.py HOST PORT KEY TOPIC KIND N DIR
"""

import asyncio
import collections
import os
import sys
import time
import zlib

HOST, PORT, KEY, TOPIC, KIND = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
N, DIR = int(sys.argv[6]), sys.argv[7]
GIB, MIB = 1 << 30, 1 << 20


def pieces(fill):
    n = GIB // MIB
    for i in range(n):
        if fill == "zeros":
            yield bytes(MIB)
            continue
        piece = bytearray(b" " * MIB)
        if i == 0:
            piece[:12] = b'{"records":['
        if i == n - 1:
            piece[-2:] = b"]}"
        yield bytes(piece)


def bomb(kind):
    coding, fill = kind.split("-")
    path = os.path.join(DIR, f"bomb-{kind}")
    if os.path.exists(path):
        return coding, open(path, "rb").read()
    out = bytearray()
    if coding == "gzip":
        c = zlib.compressobj(9, zlib.DEFLATED, 31)
        for p in pieces(fill):
            out += c.compress(p)
        out += c.flush()
    else:
        import zstandard

        c = zstandard.ZstdCompressor(level=19).compressobj(size=GIB)
        for p in pieces(fill):
            out += c.compress(p)
        out += c.flush()
    with open(path, "wb") as f:
        f.write(out)
    return coding, bytes(out)


async def upload(coding, body, statuses):
    try:
        reader, writer = await asyncio.open_connection(HOST, PORT)
    except OSError:
        statuses["connect_failed"] += 1
        return
    head = (
        f"POST /v1/topics/{TOPIC}/records HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
        f"Content-Type: application/json\r\nContent-Encoding: {coding}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    answer = None
    try:
        writer.write(head)
        for at in range(0, len(body), 64 * 1024):
            writer.write(body[at : at + 64 * 1024])
            await writer.drain()
            try:
                answer = await asyncio.wait_for(reader.read(512), timeout=0.001)
                break
            except asyncio.TimeoutError:
                pass
        answer = answer or await asyncio.wait_for(reader.read(512), timeout=60)
    except (OSError, asyncio.TimeoutError):
        try:
            answer = answer or await asyncio.wait_for(reader.read(512), timeout=5)
        except (OSError, asyncio.TimeoutError):
            pass
    status = answer.split(b" ")[1].decode() if answer and answer.startswith(b"HTTP/") else "closed"
    statuses[status] += 1
    writer.close()


async def main():
    coding, body = bomb(KIND)
    statuses = collections.Counter()
    started = time.monotonic()
    await asyncio.gather(*(upload(coding, body, statuses) for _ in range(N)))
    took = time.monotonic() - started
    print(f"{KIND}: {N} bombs of {len(body)} bytes: {dict(statuses)} in {took:.1f} s")


asyncio.run(main())
