"""What /metrics costs a worker: scrape time, series count, and a paced run's latency while it is scraped.

One worker with `receivers` registered receivers, `failing` of them pointing at
a closed port (each with one message, so each has a backlog and retries); then
paced runs (`rate` messages a second through `POST /v1/messages` to 100 of the
healthy ones, arrival at nginx timed from the API's answer, as the suite's
latency scenario), alternately without and with a scraper reading /metrics
every `every` seconds, with the worker's worst event-loop lag over each run
(its own `event_loop_lag_seconds`). Also the collector alone, in this process, over a lag
book of 10,000 and of 100,000 failing receivers (the worst case: every one of
them reported). Figures are printed, never asserted; the JSON goes to
bench/results/.

    python -m bench.metrics_scrape            # 100,000 receivers, 10,000 failing (about 4 minutes)
    python -m bench.metrics_scrape --quick    # a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from dispatcher.broker import free_port
from dispatcher.domain.actor import ReceiverState
from dispatcher.domain.breaker import Breaker, Circuit
from dispatcher.domain.records import ReceiverConfig, encode_upsert_record
from dispatcher.metrics import Counts, ReceiverBook
from dispatcher.worker_metrics import LoopLag, WorkerCollector, WorkerFigures, exposition, new_registry
from tests.harness import Api, WorkerProcess, new_app_id

from .isolation import percentiles
from .nginx import Hit, first_arrivals
from .runs import RESULTS, run_on, save, worker_loop
from .suite import Bench, body_of, progress, wait_for, wait_for_read

FULL: dict[str, Any] = {"receivers": 100_000, "failing": 10_000, "rate": 200, "seconds": 15.0, "pairs": 3,
                        "every": 1.0, "scrapes": 30, "books": (10_000, 100_000)}
QUICK: dict[str, Any] = {"receivers": 2_000, "failing": 200, "rate": 50, "seconds": 2.0, "pairs": 1,
                         "every": 0.5, "scrapes": 5, "books": (1_000,)}


async def scrape(session: aiohttp.ClientSession, url: str) -> tuple[float, bytes]:
    t0 = time.perf_counter()
    async with session.get(url + "/metrics") as response:
        body = await response.read()
    return time.perf_counter() - t0, body


def series(body: bytes) -> dict[str, Any]:
    families = list(text_string_to_metric_families(body.decode()))
    samples = [s for f in families for s in f.samples]
    per_receiver = {s.labels["receiver_id"] for s in samples if "receiver_id" in s.labels}
    statuses = {s.labels["status"]: s.value for s in samples if s.name == "webhook_dispatcher_receivers"}
    return {"series": len(samples), "bytes": len(body), "receivers_with_series": len(per_receiver),
            "by_status": statuses}


async def register_failing(
    bench: Bench, app_id: str, worker: WorkerProcess, count: int, start: int
) -> list[str]:
    """Receivers on a port nothing listens on: every attempt is a connect error."""
    dead = f"http://127.0.0.1:{free_port()}/hook"
    ids = [f"rcv_f{i:08d}" for i in range(count)]
    async with bench.producer() as producer:
        configs = [ReceiverConfig(rid, dead, "whsec_" + "A" * 32, created_at=time.time()) for rid in ids]
        topic = f"{app_id}.commands"
        sends = [await producer.send(topic, encode_upsert_record(c), c.id.encode()) for c in configs]
        await asyncio.gather(*sends)
    await wait_for_read(lambda: worker.readyz(), lambda r: r["subscriptions"]["receivers"] >= start + count,
                        max(60.0, count / 500), "failing receivers applied")
    await bench.produce_messages(app_id, ids, 1, {"n": 1})
    return ids


async def paced(bench: Bench, worker: WorkerProcess, ids: list[str], scraping: bool) -> dict[str, Any]:
    """The suite's latency scenario, with or without a scraper alongside."""
    rate, seconds, every = bench.sizes["rate"], bench.sizes["seconds"], bench.sizes["every"]
    api, answered = Api(worker.url), {}
    payload, start_hits, tag = body_of(1024), len(bench.nginx.read()), f"p{time.monotonic_ns()}"
    scrape_s: list[float] = []
    stop = asyncio.Event()

    async def scraper() -> None:
        async with aiohttp.ClientSession() as session:
            while not stop.is_set():
                took, body = await scrape(session, worker.url)
                scrape_s.append(took)
                loop_lag.append(worst_loop_lag(body))
                await asyncio.sleep(every)

    async def send(n: int) -> None:
        msg_id = f"{tag}_{n}"
        body = {"receiver_id": ids[n % len(ids)], "event_type": "bench.paced", "payload": payload,
                "id": msg_id}
        status, _ = await api.call("POST", "/v1/messages", body)
        if status == 202:
            answered[msg_id] = time.time()

    loop_lag: list[float] = []
    async with aiohttp.ClientSession() as session:
        await scrape(session, worker.url)  # the worker's worst event-loop lag counts from here
    side = asyncio.create_task(scraper()) if scraping else None
    try:
        t_start, tasks = time.monotonic(), []
        for n in range(int(rate * seconds)):
            await asyncio.sleep(max(0.0, t_start + n / rate - time.monotonic()))
            tasks.append(asyncio.create_task(send(n)))
        await asyncio.gather(*tasks)

        def arrived() -> dict[str, Hit]:
            return first_arrivals(bench.nginx.read()[start_hits:], answered)

        await wait_for(lambda: len(arrived()) >= len(answered), 60, "paced deliveries")
        found = arrived()
    finally:
        stop.set()
        if side is not None:
            await side
        await api.close()
    latency = percentiles([found[m].at + 0.0005 - answered[m] for m in found])
    async with aiohttp.ClientSession() as session:
        loop_lag.append(worst_loop_lag((await scrape(session, worker.url))[1]))
    out = {"scraping": scraping, "accepted": len(answered), "delivered": len(found),
           "worst_event_loop_lag_ms": round(max(loop_lag) * 1000, 1),
           "from_api_answer": latency}
    if scrape_s:
        out["scrape"] = percentiles(scrape_s)
    return out


async def settled(session: aiohttp.ClientSession, url: str, quiet: float = 3.0, limit: float = 90.0) -> None:
    """Wait until no attempt was made for `quiet` s: the failing receivers' first retries are done
    (the next come 5 minutes later), so the paced runs measure the scrape, not that burst."""
    def attempts(body: bytes) -> float:
        return sum(s.value for f in text_string_to_metric_families(body.decode()) for s in f.samples
                   if s.name == "webhook_dispatcher_delivery_attempts_total")

    deadline, last, since = time.monotonic() + limit, -1.0, time.monotonic()
    while time.monotonic() < deadline:
        now = attempts((await scrape(session, url))[1])
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return
        await asyncio.sleep(0.5)


def worst_loop_lag(body: bytes) -> float:
    """The worker's own figure: how late its event loop ran a timer, worst since the last scrape."""
    return next(s.value for f in text_string_to_metric_families(body.decode()) for s in f.samples
                if s.name == "webhook_dispatcher_event_loop_lag_seconds")


def collector_alone(failing: int) -> dict[str, Any]:
    """The collector over a book of `failing` receivers, in this process (no HTTP, no worker)."""
    book, now = ReceiverBook(), time.time()
    config = ReceiverConfig("r", "https://example.com/", "whsec_" + "A" * 32)
    book.counted(0, failing)
    for n in range(failing):
        state = ReceiverState(f"rcv_{n:08d}", config, next_seq=3, attempts=2, head_accepted_at=now - n,
                              breaker=Breaker(Circuit.OPEN))
        book.note(state, n % 8)
    figures = WorkerFigures(lambda: {"fast": 0, "slow": 0}, lambda: 8, lambda: {}, lambda: 0.0, lambda: True)
    registry = new_registry(WorkerCollector(Counts(), book, figures, LoopLag(), 20, frozenset()))
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        body = exposition(registry)
        times.append(time.perf_counter() - t0)
    return {"failing": failing, "ms_median": round(statistics.median(times) * 1000, 2),
            "ms_max": round(max(times) * 1000, 2), **series(body)}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    sizes = dict(QUICK if args.quick else FULL)
    result: dict[str, Any] = {"at": time.time(), "sizes": sizes,
                              "collector_alone": [collector_alone(n) for n in sizes["books"]]}
    for alone in result["collector_alone"]:
        progress(f"collector alone, {alone['failing']:,} failing receivers: {alone['ms_median']} ms, "
                 f"{alone['series']} series")
    bench = Bench(argparse.Namespace(workers=1, quick=args.quick), sizes)
    bench.start()
    try:
        app_id = new_app_id()
        worker = bench.worker(app_id, "metrics")
        await worker.wait_ready()
        healthy = sizes["receivers"] - sizes["failing"]
        ids = await bench.register(app_id, worker, healthy, path="m")
        await register_failing(bench, app_id, worker, sizes["failing"], healthy)
        async with aiohttp.ClientSession() as session:
            def failing_seen(body: bytes) -> bool:
                return series(body)["by_status"].get("retrying", 0) >= sizes["failing"]

            await wait_for_read(lambda: scrape(session, worker.url), lambda r: failing_seen(r[1]), 120,
                                "every failing receiver retrying")
            await settled(session, worker.url)
            scrapes = [await scrape(session, worker.url) for _ in range(sizes["scrapes"])]
        result["exposition"] = series(scrapes[-1][1])
        result["scrape_idle"] = percentiles([s for s, _ in scrapes])
        progress(f"{sizes['receivers']:,} receivers, {sizes['failing']:,} failing: "
                 f"{result['exposition']['series']} series, {result['exposition']['bytes']:,} bytes, "
                 "scrape p50 "
                 f"{result['scrape_idle']['p50_ms']} ms, p99 {result['scrape_idle']['p99_ms']} ms")
        result["paced"] = []
        for _ in range(sizes["pairs"]):
            for scraping in (False, True):
                run_ = await paced(bench, worker, ids[:100], scraping)
                result["paced"].append(run_)
                lat = run_["from_api_answer"]
                progress(f"paced {sizes['rate']}/s, scraping every {sizes['every']} s: {scraping}: "
                         f"p50 {lat.get('p50_ms')} ms, p99 {lat.get('p99_ms')} ms"
                         + f", worst event-loop lag {run_['worst_event_loop_lag_ms']} ms"
                         + (f", scrape p50 {run_['scrape']['p50_ms']} ms" if scraping else ""))
    finally:
        bench.stop()
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, a smoke run")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    result = run_on(worker_loop(), run(args))
    print(f"saved {save(result, args.out, kind='metrics_scrape')}")
    return result


if __name__ == "__main__":
    main()
