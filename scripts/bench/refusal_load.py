"""Sends N requests of one case to a gateway over C keep-alive connections (asyncio, raw
HTTP/1.1) and prints a JSON line: requests sent, statuses seen, seconds taken.

A case is a JSON object: method, path, headers (a list of [name, value]) and body (text).
Placeholders, filled per request: {n} the request's number, {ip:K} an address that changes
every K requests (10.a.b.c; {ip:K:OFF} starts OFF addresses further), {x:N} N bytes of "x",
{d:K} the request's number in K digits. Used by refusal-cost.sh; the gateway's CPU
is read by the caller from /proc, so this client's own speed only sets how long a run takes.
"""

import asyncio
import json
import re
import sys
import time

PLACEHOLDER = re.compile(r"\{(n|ip:\d+(?::\d+)?|x:\d+|d:\d+)\}")


def fill(text, n):
    def one(m):
        token = m.group(1)
        if token == "n":
            return str(n)
        kind, *args = token.split(":")
        k = int(args[0])
        if kind == "d":
            return str(n).zfill(k)[-k:]
        if kind == "ip":
            i = n // k + (int(args[1]) if len(args) > 1 else 0)
            return f"10.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}"
        return "x" * k

    return PLACEHOLDER.sub(one, text)


def request(case, host, n):
    body = fill(case.get("body", ""), n).encode()
    lines = [f"{case['method']} {fill(case['path'], n)} HTTP/1.1", f"Host: {host}"]
    for name, value in case.get("headers", []):
        lines.append(f"{name}: {fill(value, n)}")
    lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def read_answer(reader):
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    length, close = 0, False
    for line in lines[1:]:
        name, _, value = line.partition(":")
        name = name.strip().lower()
        if name == "content-length":
            length = int(value.strip())
        elif name == "connection" and value.strip().lower() == "close":
            close = True
    if length:
        await reader.readexactly(length)
    return status, close


async def worker(case, host, port, counter, total, statuses):
    reader = writer = None
    while True:
        n = counter[0]
        if n >= total:
            break
        counter[0] += 1
        for _ in range(3):
            try:
                if writer is None:
                    reader, writer = await asyncio.open_connection(host, port)
                writer.write(request(case, host, n))
                await writer.drain()
                status, close = await read_answer(reader)
                statuses[status] = statuses.get(status, 0) + 1
                if close:
                    writer.close()
                    writer = None
                break
            except (OSError, asyncio.IncompleteReadError, ValueError, IndexError):
                if writer is not None:
                    writer.close()
                writer = None
    if writer is not None:
        writer.close()


async def main():
    case = json.loads(sys.argv[1])
    host, port = sys.argv[2].rsplit(":", 1)
    total, concurrency = int(sys.argv[3]), int(sys.argv[4])
    counter, statuses = [0], {}
    started = time.monotonic()
    await asyncio.gather(
        *(worker(case, host, int(port), counter, total, statuses) for _ in range(concurrency))
    )
    print(json.dumps({"requests": total, "statuses": statuses, "secs": time.monotonic() - started}))


asyncio.run(main())
