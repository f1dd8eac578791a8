#!/usr/bin/env python3
"""N concurrent chunked uploads of SIZE bytes each (NDJSON records of 1,000-byte values), for
scripts/bench/stall.sh's upload-flood phase. Each upload sends 64 KiB chunks until the server answers or
the body is complete, then reads the answer. Prints one line: how many uploads got which status,
and how many bytes the clients managed to send in all."""

import asyncio
import collections
import sys

HOST, PORT, KEY, TOPIC = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
N = int(sys.argv[5]) if len(sys.argv) > 5 else 300
SIZE = int(sys.argv[6]) if len(sys.argv) > 6 else 7 * 1024 * 1024

LINE = b'{"value":"' + b"x" * 1000 + b'"}\n'
CHUNK = LINE * (64 * 1024 // len(LINE))
FRAME = b"%x\r\n" % len(CHUNK) + CHUNK + b"\r\n"


async def upload(statuses, sent):
    try:
        reader, writer = await asyncio.open_connection(HOST, PORT)
    except OSError:
        statuses["connect_failed"] += 1
        return
    head = (
        f"POST /v1/topics/{TOPIC}/records HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
        "Content-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n"
    ).encode()
    answer = None
    try:
        writer.write(head)
        total = 0
        while total < SIZE:
            writer.write(FRAME)
            await writer.drain()
            total += len(CHUNK)
            sent[0] += len(FRAME)
            try:
                answer = await asyncio.wait_for(reader.read(256), timeout=0.001)
                break
            except asyncio.TimeoutError:
                pass
        if answer is None:
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            answer = await asyncio.wait_for(reader.read(256), timeout=60)
    except (OSError, asyncio.TimeoutError):
        # The server may have answered and closed while we were still writing: read it.
        try:
            answer = answer or await asyncio.wait_for(reader.read(256), timeout=5)
        except (OSError, asyncio.TimeoutError):
            pass
    status = answer.split(b" ")[1].decode() if answer and answer.startswith(b"HTTP/") else "closed"
    statuses[status] += 1
    writer.close()


async def main():
    statuses = collections.Counter()
    sent = [0]
    await asyncio.gather(*(upload(statuses, sent) for _ in range(N)))
    codes = ", ".join(f"{k}: {v}" for k, v in sorted(statuses.items()))
    print(f"{N} uploads of {SIZE / 1048576:.0f} MiB: {codes}; clients sent {sent[0] / 1048576:.0f} MiB in all")


asyncio.run(main())
