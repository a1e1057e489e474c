"""Steady traffic: what one worker spends per message at a constant rate (`python -m bench --only steady`).

A backlog drain batches everything: a fetch brings hundreds of records, a
changelog batch carries dozens of writes, a commit covers thousands. At a
steady rate nothing is batched: each message is its own API call or producer
record, its own fetch, its own changelog batch and POST. Sizing from a drain's
CPU per delivery undercounts a steady stream, and this scenario measures by how
much.

A fresh worker holds `receivers` receivers. Its CPU is read from /proc while
it idles, then at each rate of `rates` for `seconds`: messages through
`POST /v1/messages` (`api`), then produced straight to the requests topic
by `DispatcherProducer` with its defaults (`kafka`), round-robin over the receivers. Each
run reports the worker's cores busy (from its first send until every message
of it is delivered), its CPU per message in all and above its idle cost, and
the time from each send (the API call, the producer's send) to the receiver.
Every message of every run must arrive once and in order (lost, out of order
and duplicates over the whole scenario). Sends overlap (each is a task), but a
receiver's next message is 1,000 sends later. Figures are printed, never asserted.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from dispatcher.client import DispatcherProducer
from tests.harness import new_app_id

from .nginx import Hit, first_arrivals

if TYPE_CHECKING:
    from .suite import Bench

SCENARIOS = ("steady",)
RATES, QUICK_RATES = (10, 50, 200, 800), (20,)
SECONDS, QUICK_SECONDS = 10.0, 1.0
IDLE_SECONDS, QUICK_IDLE_SECONDS = 5.0, 1.0
PATHS = ("api", "kafka")
PREFIX = "steady_"


def _suite() -> Any:
    from . import suite  # the suite imports this module: its helpers are read at call time

    return suite


async def steady(bench: Bench) -> dict[str, Any]:
    suite = _suite()
    quick = bool(bench.args.quick)
    rates, seconds = (QUICK_RATES, QUICK_SECONDS) if quick else (RATES, SECONDS)
    app_id = new_app_id()
    worker = bench.worker(app_id, "steady")
    await worker.wait_ready()
    assert worker.process is not None
    pid = worker.process.pid
    ids = await bench.register(app_id, worker, bench.sizes["receivers"], path=PREFIX)
    first_hit = len(bench.nginx.read())

    def mine() -> list[Hit]:
        return [h for h in bench.nginx.read()[first_hit:] if h.path.startswith(PREFIX)]

    await asyncio.sleep(1.0)  # the registration's writes and wakes settle
    idle_s = QUICK_IDLE_SECONDS if quick else IDLE_SECONDS
    before, began = suite.cpu_seconds(pid), time.monotonic()
    await asyncio.sleep(idle_s)
    idle_cores = (suite.cpu_seconds(pid) - before) / (time.monotonic() - began)
    suite.progress(f"  steady: the idle worker with {len(ids):,} receivers: {idle_cores:.3f} cores")
    suite.progress("  (a worker's CPU runs from a run's first send until all of it is delivered: "
                   "a rate it cannot keep up with shows as seconds of latency)")
    sent_per_path: dict[str, int] = dict.fromkeys((f"{PREFIX}{i}" for i in range(len(ids))), 0)
    runs = []
    for rate in rates:
        for path in PATHS:
            run = await _one_run(bench, worker.url, app_id, ids, path, rate, seconds, pid, idle_cores,
                                 mine, sent_per_path)
            runs.append(run)
            lat = run["send_to_receiver"]
            suite.progress(f"  steady {path} {rate}/s: {run['cores']} cores (broker {run['broker_cores']}), "
                           f"{run['cpu_ms_per_message']} CPU ms a message ({run['cpu_ms_above_idle']} above "
                           f"idle), p50 {lat.get('p50_ms')} ms p99 {lat.get('p99_ms')} ms, "
                           f"{run['delivered']}/{run['sent']}")
    await asyncio.sleep(0.2)  # the access log flushes every 50 ms
    order = suite.order_report(mine(), sent_per_path)
    worker.stop()
    return {"receivers": len(ids), "seconds": seconds, "idle_cores": round(idle_cores, 3), "runs": runs,
            **order}


async def _one_run(
    bench: Bench, url: str, app_id: str, ids: list[str], path: str, rate: int, seconds: float, pid: int,
    idle_cores: float, mine: Callable[[], list[Hit]], sent_per_path: dict[str, int],
) -> dict[str, Any]:
    suite = _suite()
    count = int(rate * seconds)
    tag = new_app_id()[-6:]
    msg_ids = [f"st{tag}_{path}_{rate}_{n}" for n in range(count)]
    sent_at: dict[str, float] = {}
    payload = suite.body_of(bench.sizes["body_bytes"])
    wanted = set(msg_ids)
    start_hit = len(mine())
    send, close = await _sender(bench, url, app_id, path)  # started before the CPU is counted
    broker = bench.broker.process.pid if bench.broker.process is not None else None
    cpu_before = suite.cpu_seconds(pid)
    broker_before = suite.cpu_seconds(broker) if broker else 0.0
    began = time.monotonic()
    try:
        pending = []
        for n, msg_id in enumerate(msg_ids):  # bounded: rate x seconds sends
            await asyncio.sleep(max(0.0, began + n / rate - time.monotonic()))
            rid = ids[n % len(ids)]
            sent_at[msg_id] = time.time()
            pending.append(asyncio.ensure_future(send(rid, msg_id, payload)))
            sent_per_path[f"{PREFIX}{n % len(ids)}"] += 1
        sending_s = time.monotonic() - began
        # Every send is awaited before the sender closes, a failed one (an exception) included.
        results = await asyncio.gather(*pending, return_exceptions=True)
        accepted = sum(r for r in results if isinstance(r, int))
    finally:
        await close()

    def arrived() -> dict[str, Hit]:
        return first_arrivals(mine()[start_hit:], wanted)

    # Polled every 0.1 s: the bench's own scans share the cores being measured. (The latencies
    # come from nginx's log, not from this poll.)
    await suite.wait_for(lambda: len(arrived()) >= count, 60 + count / 50, f"the steady {path} {rate}/s run",
                         0.1)
    found = arrived()
    elapsed = max(time.monotonic() - began, 1e-3)
    cpu = suite.cpu_seconds(pid) - cpu_before
    broker_cpu = suite.cpu_seconds(broker) - broker_before if broker else 0.0
    latencies = [found[m].at + 0.0005 - sent_at[m] for m in found]  # nginx's $msec: the ms's middle
    return {
        "path": path, "rate": rate, "sent": count, "accepted": accepted, "delivered": len(found),
        "send_errors": sum(isinstance(r, BaseException) for r in results),
        "sent_per_s": round(count / max(sending_s, 1e-3), 1),
        "cores": round(cpu / elapsed, 3), "broker_cores": round(broker_cpu / elapsed, 3),
        "cpu_ms_per_message": round(cpu / count * 1000, 3),
        "cpu_ms_above_idle": round(max(0.0, cpu - idle_cores * elapsed) / count * 1000, 3),
        "send_to_receiver": suite.percentiles(latencies),
    }


Send = Callable[[str, str, dict[str, Any]], Awaitable[int]]


async def _sender(
    bench: Bench, url: str, app_id: str, path: str
) -> tuple[Send, Callable[[], Awaitable[None]]]:
    """How one message is sent on `path` (1 when accepted), and how the sender is closed."""
    suite = _suite()
    if path == "api":
        api = suite.Api(url)

        async def post(rid: str, msg_id: str, payload: dict[str, Any]) -> int:
            body = {"receiver_id": rid, "event_type": "bench.steady", "payload": payload, "id": msg_id}
            status, _ = await api.call("POST", "/v1/messages", body)
            return int(status == 202)

        return post, api.close
    producer = DispatcherProducer(bench.broker.url.removeprefix("kafka://"), app_id)  # its defaults
    await producer.start()

    async def produce(rid: str, msg_id: str, payload: dict[str, Any]) -> int:
        await producer.send_message(rid, "bench.steady", payload, id=msg_id)
        return 1

    return produce, producer.stop


def table_rows(result: dict[str, Any]) -> list[tuple[str, str, str]]:
    if "steady" not in result:
        return []
    s = result["steady"]
    rows = [("steady: idle worker", f"{s['idle_cores']} cores", f"{s['receivers']:,} receivers")]
    for r in s["runs"]:
        lat = r["send_to_receiver"]
        rows.append((f"steady {r['path']} {r['rate']}/s", f"{r['cpu_ms_per_message']} ms",
                     f"CPU a message ({r['cpu_ms_above_idle']} above idle), {r['cores']} cores "
                     f"(broker {r['broker_cores']}); "
                     f"p50 {lat.get('p50_ms')} p99 {lat.get('p99_ms')} ms; {r['delivered']}/{r['sent']}"))
    rows.append(("  lost / out of order / dup", f"{s['lost']} / {s['out_of_order']} / {s['duplicates']}", ""))
    return rows
