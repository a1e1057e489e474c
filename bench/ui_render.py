"""Render times of the developer console with many receivers registered.

`python -m bench.ui_render [--receivers 100000] [--repeats 20]`: one worker on the embedded broker,
receivers registered by producing their upsert records (as `bench.suite` does), then each page
fetched `--repeats` times over HTTP with a logged-in session; prints the median and p95 per page.
Figures go to docs/benchmarks.md; nothing here passes or fails on time.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiokafka import AIOKafkaProducer

from dispatcher.broker import EmbeddedBroker, free_port
from dispatcher.domain.records import ReceiverConfig, encode_upsert_record
from tests.harness import TOKEN, Api, WorkerProcess, new_app_id


async def register(broker: EmbeddedBroker, app_id: str, worker: WorkerProcess, count: int) -> list[str]:
    """`count` idle receivers (URLs nobody is sent to), produced straight to the commands topic."""
    ids = [f"rcv_u{i:08d}" for i in range(count)]
    now = time.time()
    producer = AIOKafkaProducer(bootstrap_servers=broker.url.removeprefix("kafka://"), acks="all",
                                linger_ms=5, max_batch_size=1 << 20)
    await producer.start()
    try:
        pending = []
        for i, rid in enumerate(ids):
            config = ReceiverConfig(rid, f"http://127.0.0.1:9/hook/{i}", "whsec_" + "A" * 32, created_at=now)
            record = encode_upsert_record(config)
            pending.append(await producer.send(f"{app_id}.commands", record, rid.encode()))
            if len(pending) >= 20_000:
                await asyncio.gather(*pending)
                pending.clear()
        await asyncio.gather(*pending)
    finally:
        await producer.stop()
    deadline = time.monotonic() + max(120.0, count / 200)
    while time.monotonic() < deadline:
        if (await worker.readyz())["subscriptions"]["receivers"] >= count:
            return ids
        await asyncio.sleep(1)
    raise RuntimeError(f"receivers not applied; see {worker.log_path}")


async def timed(session: aiohttp.ClientSession, url: str, repeats: int) -> dict[str, Any]:
    times, size = [], 0
    for _ in range(repeats):
        t0 = time.perf_counter()
        async with session.get(url) as resp:
            body = await resp.read()
            assert resp.status == 200 and "/ui/login" not in str(resp.url), (url, resp.status, body[:300])
        times.append((time.perf_counter() - t0) * 1000)
        size = len(body)
    first = times[0]
    times.sort()
    p95 = times[int(0.95 * (len(times) - 1))]
    rows = body.count(b'<td><a href="/ui/receivers/')  # receivers the page lists
    return {"first_ms": round(first, 1), "median_ms": round(statistics.median(times), 1),
            "p95_ms": round(p95, 1), "bytes": size, "rows": rows}


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-ui-"))
    broker = EmbeddedBroker(free_port()).start(str(tmp / "broker.log"))
    app_id = new_app_id()
    worker = WorkerProcess(broker.url, app_id, tmp / "data", tmp / "worker.log",
                           {"DISPATCHER_LOG_LEVEL": "warning"}).start()
    try:
        await worker.wait_ready()
        t0 = time.perf_counter()
        ids = await register(broker, app_id, worker, args.receivers)
        print(f"{args.receivers:,} receivers registered in {time.perf_counter() - t0:.0f} s")
        api = Api(worker.url)
        await api.call("POST", f"/v1/receivers/{ids[len(ids) // 2]}/pause", {"reason": "bench"})
        await api.close()
        # unsafe: the jar keeps cookies of an IP address (the worker's 127.0.0.1)
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as session:
            async with session.post(worker.url + "/ui/login", data={"token": TOKEN, "next": "/ui/"},
                                    allow_redirects=False) as resp:
                assert resp.status == 303
            middle = ids[len(ids) // 2]
            pages = {
                "receivers, first page": "/ui/receivers",
                "receivers, a page from the middle": f"/ui/receivers?cursor={middle}",
                "receivers, search: one at 12 %": f"/ui/receivers?q=hook/{args.receivers // 8}",
                "receivers, search: one at the end": f"/ui/receivers?q=hook/{args.receivers - 7}",
                "receivers, status paused (one)": "/ui/receivers?status=paused",
                "receiver page": f"/ui/receivers/{middle}",
                "overview": "/ui/",
            }
            results = {}
            for name, path in pages.items():
                results[name] = await timed(session, worker.url + path, args.repeats)
                print(f"{name:36} first {results[name]['first_ms']:7.1f} ms   "
                      f"median {results[name]['median_ms']:7.1f} ms   "
                      f"p95 {results[name]['p95_ms']:7.1f} ms   {results[name]['bytes']:,} bytes   "
                      f"{results[name]['rows']} rows")
        return {"receivers": args.receivers, "repeats": args.repeats, "pages": results}
    finally:
        worker.stop()
        broker.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--receivers", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=20)
    asyncio.run(measure(parser.parse_args()))


if __name__ == "__main__":
    main()
