#!/usr/bin/env python3
"""A mixed flood on a gateway's admin listener, each client reconnecting as soon as its
connection is closed: 100 silent addresses; two connections from each of 80 addresses asking
`/healthz`, of 60 opening HTTP/2 sessions that ask nothing and of 60 carrying wrong tokens; one
address with 120 silent connections. Meanwhile a probe from a fresh address asks `/healthz`
every 0.5 s. Prints each probe's wait, the connections the flood opened, and the gateway's CPU
seconds over the run (from /proc, given its PID).

    admin_flood.py HOST:PORT GATEWAY_PID [SECONDS]
"""

import asyncio
import sys
import time

HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
H2_HELLO = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00"
WRONG = b"GET /admin/tenants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong\r\n\r\n"
KINDS = [
    (100, 1, "127.0.4", b""),
    (80, 2, "127.0.5", HEALTHZ),
    (60, 2, "127.0.6", H2_HELLO),
    (60, 2, "127.0.7", WRONG),
    (1, 120, "127.0.8", b""),
]


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100.0


async def client(host, port, local, hello, until, opened):
    while time.monotonic() < until:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(host, port, local_addr=(local, 0)),
                max(0.01, until - time.monotonic()),
            )
        except (OSError, asyncio.TimeoutError):
            await asyncio.sleep(0.02)
            continue
        opened[0] += 1
        try:
            if hello:
                writer.write(hello)
            while time.monotonic() < until:
                data = await asyncio.wait_for(reader.read(1024), until - time.monotonic())
                if not data:
                    break
        except (OSError, asyncio.TimeoutError):
            pass
        writer.close()
        await asyncio.sleep(0.02)


async def probe(host, port, local):
    started = time.monotonic()
    reader, writer = await asyncio.open_connection(host, port, local_addr=(local, 0))
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    line = await asyncio.wait_for(reader.readline(), 30)
    writer.close()
    return time.monotonic() - started, line.decode().strip()


async def main():
    host, port = sys.argv[1].rsplit(":", 1)
    port = int(port)
    pid = int(sys.argv[2])
    seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 12
    until = time.monotonic() + seconds
    opened = [0]
    cpu0 = cpu_seconds(pid)
    tasks = []
    for addresses, each, net, hello in KINDS:
        for i in range(addresses * each):
            local = f"{net}.{1 + i // each}"
            tasks.append(asyncio.create_task(client(host, port, local, hello, until, opened)))
    await asyncio.sleep(2)
    waits = []
    i = 0
    while time.monotonic() + 1 < until:
        wait, line = await probe(host, port, f"127.0.3.{10 + i}")
        waits.append((round(wait, 3), line))
        i += 1
        await asyncio.sleep(0.5)
    await asyncio.gather(*tasks)
    cpu = cpu_seconds(pid) - cpu0
    print(f"probes: {waits}")
    print(f"max probe wait {max(w for w, _ in waits):.3f} s; {opened[0]} connections opened; "
          f"gateway CPU {cpu:.2f} s over {seconds:.0f} s ({cpu / seconds:.2f} of a core)")


asyncio.run(main())
