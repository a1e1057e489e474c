"""What one POST costs the client: bare aiohttp, the worker's two transports, a minimal HTTP/1.1 client.

The same 1 KiB bodies go to the same nginx paths as the suite's ceiling, one
request in flight per path, on one event loop, and the client's CPU per 1,000
POSTs is taken from `time.process_time`. The minimal client (keep-alive,
Content-Length answers only, no TLS, no timeouts, no caps) is the floor of a
Python HTTP client on this machine, not a candidate to ship: it tells how much
of a delivery's CPU a leaner client could save. Figures are printed, never
asserted; the JSON is saved under bench/results/.

    python -m bench.http_clients             # 20,000 POSTs per client, 3 rounds
    python -m bench.http_clients --quick     # a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from dispatcher.broker import free_port
from dispatcher.domain.addresses import AllowList, TargetPolicy
from dispatcher.http1 import Http1Transport
from dispatcher.settings import Settings
from dispatcher.target_guard import TargetGuard
from dispatcher.transport import AiohttpTransport

from .nginx import NginxReceiver
from .runs import RESULTS, run_on, save, worker_loop
from .suite import body_of, cpu_model, progress

Post = Callable[[int, bytes, dict[str, str]], Awaitable[int]]


class _RawConnection(asyncio.Protocol):
    """One keep-alive connection; answers must carry Content-Length (nginx's do)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.waiter: asyncio.Future[int] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0 or self.waiter is None:
            return
        head = bytes(self.buffer[:end]).split(b"\r\n")
        length = next(int(line.split(b":", 1)[1]) for line in head[1:]
                      if line[:15].lower() == b"content-length:")
        if len(self.buffer) < end + 4 + length:
            return
        del self.buffer[: end + 4 + length]
        self.waiter.set_result(int(head[0].split(b" ", 2)[1]))

    def connection_lost(self, exc: Exception | None) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(exc or ConnectionError("closed"))


class RawClient:
    def __init__(self, port: int) -> None:
        self.port = port
        self.connections: dict[int, _RawConnection] = {}

    async def post(self, path: int, body: bytes, headers: dict[str, str]) -> int:
        conn = self.connections.get(path)
        if conn is None:
            loop = asyncio.get_running_loop()
            _, conn = await loop.create_connection(_RawConnection, "127.0.0.1", self.port)
            self.connections[path] = conn
        lines = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        head = (f"POST /raw_{path} HTTP/1.1\r\nhost: 127.0.0.1:{self.port}\r\n"
                f"content-length: {len(body)}\r\n{lines}\r\n")
        conn.waiter = asyncio.get_running_loop().create_future()
        assert conn.transport is not None
        conn.transport.writelines((head.encode(), body))
        return await conn.waiter

    async def close(self) -> None:
        for conn in self.connections.values():
            if conn.transport is not None:
                conn.transport.close()


async def measure(post: Post, n: int, paths: int, body: bytes) -> dict[str, float]:
    async def one_path(i: int) -> None:
        for seq in range(1, n // paths + 1):
            headers = {"content-type": "application/json", "webhook-id": f"h{i}_{seq}",
                       "webhook-sequence": str(seq)}
            status = await post(i, body, headers)
            assert status == 200, status

    cpu0, t0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(one_path(i) for i in range(paths)))
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    done = n // paths * paths
    return {"per_s": done / elapsed, "cpu_s_per_1000": cpu / done * 1000}


async def bare_aiohttp(nginx: NginxReceiver, n: int, paths: int, body: bytes) -> dict[str, float]:
    connector = aiohttp.TCPConnector(limit=paths, limit_per_host=paths)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def post(i: int, body: bytes, headers: dict[str, str]) -> int:
            async with session.post(nginx.url(f"bare_{i}"), data=body, headers=headers) as resp:
                await resp.read()
                return resp.status

        return await measure(post, n, paths, body)


async def aiohttp_transport(nginx: NginxReceiver, n: int, paths: int, body: bytes) -> dict[str, float]:
    return await worker_transport(AiohttpTransport, nginx, n, paths, body)


async def http1_transport(nginx: NginxReceiver, n: int, paths: int, body: bytes) -> dict[str, float]:
    return await worker_transport(Http1Transport, nginx, n, paths, body)


async def worker_transport(
    kind: type[AiohttpTransport | Http1Transport], nginx: NginxReceiver, n: int, paths: int, body: bytes
) -> dict[str, float]:
    s = Settings()
    guard = TargetGuard(TargetPolicy(AllowList.parse("127.0.0.0/8")))
    transport = kind(guard, s.timeout, s.connect_timeout, s.response_cap, paths)
    urls = [nginx.url(f"{kind.__name__}_{i}") for i in range(paths)]

    async def post(i: int, body: bytes, headers: dict[str, str]) -> int:
        return (await transport.post(urls[i], headers, body)).status

    try:
        return await measure(post, n, paths, body)
    finally:
        await transport.close()


async def minimal_client(nginx: NginxReceiver, n: int, paths: int, body: bytes) -> dict[str, float]:
    raw = RawClient(nginx.port)
    try:
        return await measure(raw.post, n, paths, body)
    finally:
        await raw.close()


CLIENTS = {
    "aiohttp": ("bare aiohttp ClientSession", bare_aiohttp),
    "transport": ("the worker's AiohttpTransport", aiohttp_transport),
    "http1": ("the worker's Http1Transport", http1_transport),
    "raw": ("minimal HTTP/1.1 client (floor)", minimal_client),
}


async def run(args: argparse.Namespace, nginx: NginxReceiver) -> dict[str, Any]:
    body = orjson.dumps({"type": "bench.http", "timestamp": "2026-01-01T00:00:00Z",
                         "data": body_of(1024)})
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in CLIENTS}
    for round_no in range(args.rounds):  # interleaved, so a slow spell of the machine hits all of them
        for name, (_, client) in CLIENTS.items():
            runs[name].append(await client(nginx, args.posts, args.paths, body))
        progress(f"round {round_no + 1}: " + ", ".join(
            f"{name} {r[-1]['cpu_s_per_1000']:.3f} s/1000 ({r[-1]['per_s']:,.0f}/s)"
            for name, r in runs.items()))
    return {name: {key: statistics.median(r[key] for r in rs) for key in ("per_s", "cpu_s_per_1000")}
            for name, rs in runs.items()}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--posts", type=int, default=20_000)
    parser.add_argument("--paths", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.quick:
        args.posts, args.paths, args.rounds = 200, 20, 1
    loop = worker_loop()
    nginx = NginxReceiver(Path(tempfile.mkdtemp(prefix="bench-http-")) / "nginx", free_port()).start()
    try:
        medians = run_on(loop, run(args, nginx))
    finally:
        nginx.stop()
    result = {"at": time.time(), "cpu": cpu_model(), "cpus": os.cpu_count(), "event_loop": loop,
              "posts": args.posts, "paths": args.paths, "rounds": args.rounds, "median": medians}
    path = save(result, args.out, "http-clients")
    print(f"\n{os.cpu_count()} x {result['cpu']}, event loop {loop}; medians of {args.rounds} rounds")
    for name, (label, _) in CLIENTS.items():
        m = medians[name]
        print(f"{label:<34}{m['cpu_s_per_1000']:>8.3f} CPU s/1000   {m['per_s']:>8,.0f}/s")
    print(f"\nsaved {path}")
    return result


if __name__ == "__main__":
    main()
