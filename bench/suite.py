"""The benchmark suite: throughput, latency, CPU, memory and recovery, beside the bare-aiohttp ceiling.

One run on this machine: the embedded broker, one worker and Debian's nginx on
127.0.0.1 as the receiver (it logs each request's arrival, path, webhook-id and
sequence). Scenarios, in order:

1. ceiling   bare aiohttp POSTing the same bodies to the same receiver paths, one
             request in flight per receiver path (the order an ordered receiver needs)
2. floor     the stack without the engine: a bare aiokafka consumer reading the drain's
             records and POSTing each with the worker's HTTP client, one in flight per
             receiver, nothing stored (`floor.py`)
3. drain     N messages of 1 KiB to R ordered receivers, produced to the requests
             topic while no worker runs; first to last delivery, worker CPU, order
4. latency   paced messages through `POST /v1/messages`; receiver arrival - API answer
5. events    sparse paced events through `POST /v1/events` to a few subscribed receivers:
             the API's answer, and the event call -> each copy's arrival (fan-out included)
6. ingest    messages accepted per second through `POST /v1/messages/batch`
7. memory    worker RSS with 0, and then more, registered idle receivers, and with
             one (paused) receiver holding a backlog
8. recovery  kill -9 the worker holding the registered receivers, start another:
             seconds to the first delivery and to every partition recovered

Figures are printed, never asserted; the JSON of every run goes to bench/results/.

    python -m bench                      # the full run (about 15 minutes)
    python -m bench --quick              # tiny sizes, a smoke run of a minute
    python -m bench --only drain,latency
    python -m bench --only ceiling,drain --workers 2   # the drain by two workers in one group
    python -m bench --only tls,hosts,workers,restart   # bench/perf2.py: HTTPS, 100 origins,
                                                       # 1 and 2 workers, the restart gap
    python -m bench --only workers,peers   # bench/peers.py: arq and dramatiq on the drain's
                                           # workload, beside one and two workers (the bench extra)
"""

from __future__ import annotations

import argparse
import asyncio
import compileall
import contextlib
import os
import ssl
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from dispatcher.broker import EmbeddedBroker, free_ports
from dispatcher.domain.events import copy_id
from dispatcher.domain.ids import new_id
from dispatcher.domain.records import Message, ReceiverConfig, encode_message_record, encode_upsert_record
from dispatcher.partitioning import partitioner
from tests.harness import Api, WorkerProcess, create_topic, new_app_id

from . import peers, perf2, steady
from .floor import FETCH_MAX_WAIT_MS, consume_and_post
from .isolation import percentiles
from .nginx import Hit, NginxReceiver, first_arrivals
from .runs import RESULTS, run_on, save, worker_loop

SCENARIOS = ("ceiling", "floor", "drain", "latency", "events", "ingest", "memory", "recovery")
# Chosen by name only (`--only`): bench/perf2.py and bench/peers.py, each beside its own ceiling,
# and bench/steady.py.
EXTRA_MODULES = (perf2, peers, steady)
EXTRA_SCENARIOS = tuple(name for module in EXTRA_MODULES for name in module.SCENARIOS)
TICKS = os.sysconf("SC_CLK_TCK")
PARTITIONS = 8  # the worker's default
HEAP_TRIM = 2.0  # seconds between heap trims of the memory scenario's worker

FULL = {"messages": 20_000, "receivers": 1_000, "body_bytes": 1024, "rate": 200, "seconds": 10.0,
        "ingest_messages": 20_000, "idle_receivers": [100_000, 1_000_000], "backlog": 100_000,
        "recovery_receivers": 100_000, "repeats": 3, "events": 40, "event_rate": 4.0, "subscribers": 5}
QUICK = {"messages": 400, "receivers": 20, "body_bytes": 1024, "rate": 50, "seconds": 1.0,
         "events": 8, "event_rate": 4.0, "subscribers": 3, "ingest_messages": 2_000,
         "idle_receivers": [500], "backlog": 500,
         "recovery_receivers": 300, "repeats": 1}


def progress(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


def spread(values: list[float], digits: int = 1) -> dict[str, float]:
    """min / median / max of repeats."""
    return {"min": round(min(values), digits), "median": round(statistics.median(values), digits),
            "max": round(max(values), digits), "runs": len(values)}


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def machine_busy() -> tuple[float, float]:
    """(CPU seconds every core has been busy, monotonic now), from /proc/stat: over a span, the
    machine's busy cores, the processes of other people's work included."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle and iowait
    return (sum(fields[:8]) - idle) / TICKS, time.monotonic()


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def body_of(size: int) -> dict[str, Any]:
    """A payload whose JSON request body is about `size` bytes."""
    return {"invoice": "in_" + "x" * max(0, size - 120), "amount": 4200, "currency": "eur"}


def order_report(hits: list[Hit], expected: dict[str, int]) -> dict[str, int]:
    """Lost, duplicate and out-of-order deliveries; `expected` is messages per path."""
    seen: set[str] = set()
    last: dict[str, int] = {}
    duplicates = out_of_order = 0
    for hit in hits:
        if hit.msg_id in seen:
            duplicates += 1
            continue
        seen.add(hit.msg_id)
        if hit.seq != last.get(hit.path, 0) + 1:
            out_of_order += 1
        last[hit.path] = hit.seq
    return {"delivered": len(seen), "lost": sum(expected.values()) - len(seen),
            "duplicates": duplicates, "out_of_order": out_of_order}


def arrivals(hits: list[Hit], prefix: str, counts: dict[str, int], cpu_s: float) -> dict[str, Any]:
    """One run's figures from nginx's log: each message's first arrival, first to last, with the
    CPU per 1,000 of them and loss, duplicates and order (`counts`: messages per receiver, in the
    order of the paths `<prefix><n>`)."""
    firsts: dict[str, float] = {}
    for h in hits:
        firsts.setdefault(h.msg_id, h.at)
    span = max(firsts.values()) - min(firsts.values())
    expected = {f"{prefix}{i}": c for i, c in enumerate(counts.values())}
    return {"per_s": len(firsts) / max(span, 1e-3), "seconds": round(span, 3),
            "cpu_s_per_1000": cpu_s / max(len(firsts), 1) * 1000, **order_report(hits, expected)}


def repeated(bench: Bench, runs: list[dict[str, Any]], result: dict[str, Any]) -> dict[str, Any]:
    """The figures of a scenario's runs over the drain's records, with its ratio to the ceiling."""
    n, r = bench.sizes["messages"], bench.sizes["receivers"]
    out = {"messages": n // r * r, "receivers": r,
           "per_s": spread([x["per_s"] for x in runs], 0),
           "cpu_s_per_1000": spread([x["cpu_s_per_1000"] for x in runs], 3),
           "lost": sum(x["lost"] for x in runs), "out_of_order": sum(x["out_of_order"] for x in runs),
           "duplicates": sum(x["duplicates"] for x in runs), "runs": runs}
    if "ceiling" in result:
        out["ratio_to_ceiling"] = round(out["per_s"]["median"] / result["ceiling"]["per_s"]["median"], 3)
    return out


async def wait_for(check: Callable[[], bool], limit: float, what: str, step: float = 0.02) -> bool:
    """Poll until `check()`; bounded by `limit` seconds. False (and a line) on time-out."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if check():
            return True
        await asyncio.sleep(step)
    progress(f"gave up waiting for {what} after {limit:.0f}s")
    return False


class Bench:
    """The shared parts of a run: broker, nginx, temp dirs, and the worker being measured."""

    def __init__(self, args: argparse.Namespace, sizes: dict[str, Any]) -> None:
        self.args = args
        self.sizes = sizes
        self.tmp = Path(tempfile.mkdtemp(prefix="bench-"))
        broker_port, nginx_port = free_ports(2)
        self.broker = EmbeddedBroker(broker_port)
        self.nginx = NginxReceiver(self.tmp / "nginx", nginx_port)
        self.processes: list[WorkerProcess] = []
        self.workers: int = args.workers  # in the drain's consumer group
        self.app_id = ""

    def start(self) -> None:
        self.broker.start(str(self.tmp / "broker.log"))
        self.nginx.start()

    def stop(self) -> None:
        for worker in self.processes:
            worker.stop()
        self.nginx.stop()
        self.broker.stop()

    def worker(self, app_id: str, data: str, port: int = 0, **env: str) -> WorkerProcess:
        """A worker on its own data dir (and `port`: 0 picks a free one)."""
        worker = WorkerProcess(
            self.broker.url, app_id, self.tmp / data, self.tmp / f"{data}.log",
            # The defaults, but for loopback targets, one host for every receiver, and the log level.
            {"DISPATCHER_ALLOW_TARGETS": "127.0.0.1/32", "DISPATCHER_HOST_LIMIT": "4096",
             "DISPATCHER_LOG_LEVEL": os.environ.get("BENCH_LOG_LEVEL", "warning"),
             "DISPATCHER_RETRY_SCHEDULE": "5s,5m,30m,2h,5h,10h,10h,14h,20h,24h",
             "DISPATCHER_MAX_ATTEMPTS": "0",
             "DISPATCHER_PROBE_BASE": "5", "DISPATCHER_PROBE_CAP": "300", **env},
            port=port,
        ).start()
        self.processes.append(worker)
        return worker

    def workers_of(self, app_id: str) -> list[WorkerProcess]:
        return [w for w in self.processes if w.app_id == app_id]

    async def changelog_records(self, app_id: str) -> int:
        """Records in the worker's actor-table changelog so far (every partition's end offset)."""
        consumer = AIOKafkaConsumer(bootstrap_servers=self.broker.url.removeprefix("kafka://"))
        await consumer.start()
        try:
            topic = f"{app_id}-actors-changelog"
            await consumer.topics()  # the cluster's metadata, this topic's partitions among it
            tps = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or ()]
            return sum((await consumer.end_offsets(tps)).values()) if tps else 0
        finally:
            await consumer.stop()

    def producer(self) -> AIOKafkaProducer:
        host = self.broker.url.removeprefix("kafka://")
        return AIOKafkaProducer(bootstrap_servers=host, acks="all", linger_ms=5, max_batch_size=1 << 20,
                                max_request_size=8 << 20)

    async def register(self, app_id: str, worker: WorkerProcess, count: int, path: str = "r",
                       start: int = 0, url: Callable[[str], str] | None = None) -> list[str]:
        """Register `count` receivers by producing their upsert records (the API's) to the commands topic.

        Receiver n's URL is `url(f"{path}{n}")` (default: this run's nginx)."""
        ids = [f"rcv_b{start + i:08d}" for i in range(count)]
        url_of = url or self.nginx.url
        now = time.time()
        async with self.producer() as producer:
            pending = []
            for i, rid in enumerate(ids):
                config = ReceiverConfig(rid, url_of(f"{path}{start + i}"), "whsec_" + "A" * 32,
                                        created_at=now)
                pending.append(await producer.send(f"{app_id}.commands", encode_upsert_record(config),
                                                   rid.encode()))
                if len(pending) >= 20_000:
                    await asyncio.gather(*pending)
                    pending.clear()
                    progress(f"  {i + 1:,} of {count:,} receivers produced")
            await asyncio.gather(*pending)
        target = start + count
        done = await wait_for_read(
            lambda: worker.readyz(), lambda r: r["subscriptions"]["receivers"] >= target,
            max(60.0, count / 500), f"{count:,} receivers applied",
            lambda r: progress(f"  {r['subscriptions']['receivers']:,} of {target:,} receivers applied"),
        )
        if not done:
            raise RuntimeError(f"receivers not applied; see {worker.log_path}")
        return ids

    async def produce_messages(self, app_id: str, targets: list[str], per_receiver: int,
                               payload: dict[str, Any]) -> dict[str, int]:
        """`per_receiver` messages to each target, round-robin, straight to the requests topic."""
        counts = dict.fromkeys(targets, 0)
        async with self.producer() as producer:
            pending = []
            for n in range(per_receiver):
                for rid in targets:
                    msg = Message(new_id("msg"), rid, "bench.drain", payload, {}, time.time())
                    pending.append(await producer.send(f"{app_id}.requests", encode_message_record(msg),
                                                       rid.encode()))
                    counts[rid] += 1
                if len(pending) >= 10_000:
                    await asyncio.gather(*pending)
                    pending.clear()
                    progress(f"  {(n + 1) * len(targets):,} messages produced")
            await asyncio.gather(*pending)
        return counts


async def wait_for_read(
    read: Callable[[], Awaitable[Any]], check: Callable[[Any], bool], limit: float, what: str,
    report: Callable[[Any], None] | None = None, every: float = 10.0,
) -> bool:
    """Poll `read()` until `check` holds; prints progress every `every` s; bounded by `limit` s."""
    deadline = time.monotonic() + limit
    said = time.monotonic()
    while time.monotonic() < deadline:
        with contextlib.suppress(aiohttp.ClientError):
            value = await read()
            if check(value):
                return True
            if report is not None and time.monotonic() - said > every:
                report(value)
                said = time.monotonic()
        await asyncio.sleep(0.1)
    progress(f"gave up waiting for {what} after {limit:.0f}s")
    return False


# scenarios ---------------------------------------------------------------------------


async def ceiling_once(bench: Bench, prefix: str, url: Callable[[str], str] | None = None,
                       ssl_context: ssl.SSLContext | None = None) -> dict[str, float]:
    """One ceiling run: bare aiohttp POSTs the drain's bodies to paths `<prefix><i>` (`url`: the
    receiver's URL of a path, default this run's nginx), one in flight per path."""
    n, r = bench.sizes["messages"], bench.sizes["receivers"]
    url_of = url or bench.nginx.url
    body = orjson.dumps({"type": "bench.drain", "timestamp": "2026-01-01T00:00:00Z",
                         "data": body_of(bench.sizes["body_bytes"])})
    connector = aiohttp.TCPConnector(limit=r, limit_per_host=r, ssl=ssl_context if ssl_context else True)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one_path(i: int, per: int) -> None:
            target = url_of(f"{prefix}{i}")
            for seq in range(1, per + 1):
                headers = {"content-type": "application/json", "webhook-id": f"{prefix}{i}_{seq}",
                           "webhook-sequence": str(seq)}
                async with session.post(target, data=body, headers=headers) as resp:
                    await resp.read()
                    assert resp.status == 200

        cpu0, t0 = time.process_time(), time.perf_counter()
        await asyncio.gather(*(one_path(i, n // r) for i in range(r)))
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    return {"per_s": (n // r * r) / elapsed, "cpu_s_per_1000": cpu / (n // r * r) * 1000}


def ceiling_figures(bench: Bench, runs: list[dict[str, float]]) -> dict[str, Any]:
    n, r = bench.sizes["messages"], bench.sizes["receivers"]
    return {"messages": n // r * r, "receivers": r,
            "per_s": spread([x["per_s"] for x in runs], 0),
            "client_cpu_s_per_1000": spread([x["cpu_s_per_1000"] for x in runs], 3)}


async def ceiling(bench: Bench) -> dict[str, Any]:
    """Bare aiohttp: the same bodies to the same paths, one in flight per path, no broker, no signing."""
    runs = []
    for repeat in range(bench.sizes["repeats"]):
        runs.append(await ceiling_once(bench, f"ceiling{repeat}_"))
        progress(f"  ceiling run {repeat + 1}: {runs[-1]['per_s']:,.0f}/s")
    return ceiling_figures(bench, runs)


async def floor(bench: Bench, result: dict[str, Any]) -> dict[str, Any]:
    """The drain's records through a bare aiokafka consumer that POSTs each: no engine, no state."""
    n, r = bench.sizes["messages"], bench.sizes["receivers"]
    servers = bench.broker.url.removeprefix("kafka://")
    runs = []
    for repeat in range(bench.sizes["repeats"]):
        app_id = new_app_id()
        await create_topic(servers, f"{app_id}.requests", PARTITIONS)
        ids = [f"rcv_b{i:08d}" for i in range(r)]
        prefix = f"floor{repeat}_"
        counts = await bench.produce_messages(app_id, ids, n // r, body_of(bench.sizes["body_bytes"]))
        total = sum(counts.values())
        first_hit = len(bench.nginx.read())
        urls = {rid.encode(): bench.nginx.url(f"{prefix}{i}") for i, rid in enumerate(ids)}
        cpu = await consume_and_post(servers, f"{app_id}.requests", urls, total)
        await asyncio.sleep(0.2)  # the access log flushes every 50 ms
        hits = [h for h in bench.nginx.read()[first_hit:] if h.path.startswith(prefix)]
        runs.append(arrivals(hits, prefix, counts, cpu))
        progress(f"  floor run {repeat + 1}: {runs[-1]['per_s']:,.0f}/s, "
                 f"{runs[-1]['cpu_s_per_1000']:.3f} CPU s/1000, lost {runs[-1]['lost']}")
    return {**repeated(bench, runs, result), "fetch_max_wait_ms": FETCH_MAX_WAIT_MS}


async def drain_once(bench: Bench, repeat: int, tag: str = "drain", receiver: NginxReceiver | None = None,
                     workers: int | None = None, env: dict[str, str] | None = None,
                     url: Callable[[str], str] | None = None,
                     ) -> tuple[dict[str, Any], WorkerProcess, list[str], str]:
    """One drain run: register, stop the worker, produce the backlog, start the workers, time the drain.

    `tag` names the run's paths and data dirs; `receiver` is the nginx the receivers' URLs point at
    (default this run's), `url` a path's URL there (default its first origin); `workers` drain it
    together (default `--workers`); `env` goes to each worker.
    """
    n, r = bench.sizes["messages"], bench.sizes["receivers"]
    nginx = receiver or bench.nginx
    count = bench.workers if workers is None else workers
    extra = env or {}
    app_id = new_app_id()
    worker = bench.worker(app_id, f"{tag}{repeat}", **extra)
    await worker.wait_ready()
    prefix = f"{tag}{repeat}_"
    ids = await bench.register(app_id, worker, r, path=prefix, url=url or nginx.url)
    worker.stop()
    progress(f"  {tag} run {repeat + 1}: producing {n:,} messages to {r:,} receivers, no worker running")
    counts = await bench.produce_messages(app_id, ids, n // r, body_of(bench.sizes["body_bytes"]))
    total = sum(counts.values())
    changelog_before = await bench.changelog_records(app_id)
    first_hit = len(nginx.read())
    # The first on the same data dir (a restart); with several workers the others join its consumer
    # group at the same moment (one group generation) and recover their partitions from the changelog.
    started = time.time()
    group = [bench.worker(app_id, f"{tag}{repeat}" + (f"w{k}" if k else ""), **extra) for k in range(count)]
    worker = group[0]
    pids = [w.process.pid for w in group if w.process is not None]

    tally = Tally(nginx, prefix, first_hit)
    span = CpuSpan(pids, {"broker": bench.broker.process, "nginx": nginx.process})
    await wait_for(lambda: tally.update() > 0, 120, "the first delivery", 0.005)
    span.start()
    await wait_for(lambda: tally.update() >= total, 600, "the drain")
    workers_cpu, others_cpu = span.stop(total)
    await asyncio.sleep(0.2)  # the access log flushes every 50 ms
    tally.update()
    hits = tally.hits
    # What the drain wrote to the changelog (the last outcomes' writes go out within a linger).
    changelog = await bench.changelog_records(app_id) - changelog_before
    run = {**arrivals(hits, prefix, counts, workers_cpu), "workers": count,
           "changelog_records_per_delivery": round(changelog / total, 2) if total else None,
           "start_to_first_delivery_s": round(min(h.at for h in hits) - started, 2) if hits else None,
           **others_cpu}
    if count > 1:  # where the span goes: each worker's share, first and last delivery
        run["per_worker"] = await per_worker(group, hits, ids, prefix, min(h.at for h in hits))
    progress(f"  {tag} run {repeat + 1} ({count} worker{'s' if count > 1 else ''}): {run['per_s']:,.0f}/s, "
             f"{run['cpu_s_per_1000']:.3f} CPU s/1000, "
             f"{run['changelog_records_per_delivery']} changelog records per delivery, lost {run['lost']}, "
             f"out of order {run['out_of_order']}, "
             f"first delivery {run['start_to_first_delivery_s']} s after the start")
    return run, worker, ids, app_id


class CpuSpan:
    """CPU over a span: the workers' (`pids`), other processes' of the run (the broker, nginx), the
    bench's own, and the machine's busy cores with the share that went to work outside the run."""

    def __init__(self, pids: list[int], others: dict[str, subprocess.Popen[bytes] | None]) -> None:
        self.pids = pids
        self.others = {name: proc.pid for name, proc in others.items() if proc is not None}
        self.first: dict[str, float] = {}
        self.busy_first = (0.0, 0.0)

    def _now(self) -> dict[str, float]:
        return {"workers": sum(cpu_seconds(pid) for pid in self.pids), "bench": time.process_time(),
                **{name: cpu_seconds(pid) for name, pid in self.others.items()}}

    def start(self) -> None:
        self.first, self.busy_first = self._now(), machine_busy()

    def stop(self, deliveries: int) -> tuple[float, dict[str, float]]:
        """The workers' CPU seconds, and the other figures (CPU s per 1,000 deliveries, cores)."""
        last, busy_last = self._now(), machine_busy()
        used = {name: last[name] - self.first[name] for name in last}
        figures = {f"{name}_cpu_s_per_1000": round(used[name] / deliveries * 1000, 3) for name in self.others}
        wall = busy_last[1] - self.busy_first[1]
        busy = busy_last[0] - self.busy_first[0]
        figures["bench_cpu_s"] = round(used["bench"], 3)
        figures["machine_busy_cores"] = round(busy / wall, 2)
        figures["busy_cores_outside_the_run"] = round((busy - sum(used.values())) / wall, 2)
        return used["workers"], figures


class Tally:
    """The hits nginx logged under a path prefix and their distinct messages, read as the log grows
    (the drain's wait re-read all of them every 20 ms: the bench's own CPU, taken from the workers)."""

    def __init__(self, nginx: NginxReceiver, prefix: str, start: int) -> None:
        self.nginx, self.prefix, self.at = nginx, prefix, start
        self.hits: list[Hit] = []
        self.ids: set[str] = set()

    def update(self) -> int:
        """The distinct messages so far."""
        hits = self.nginx.read()
        for hit in hits[self.at:]:
            if hit.path.startswith(self.prefix):
                self.hits.append(hit)
                self.ids.add(hit.msg_id)
        self.at = len(hits)
        return len(self.ids)


async def owners(group: list[WorkerProcess]) -> list[list[int]]:
    """Each worker's partitions, as it reports them now ([] for one that does not answer)."""
    held: list[list[int]] = []
    for worker in group:
        partitions: list[int] = []
        with contextlib.suppress(aiohttp.ClientError):
            partitions = list((await worker.readyz()).get("partitions", []))
        held.append(partitions)
    return held


async def per_worker(group: list[WorkerProcess], hits: list[Hit], ids: list[str], prefix: str,
                     t0: float) -> list[dict[str, Any]]:
    """Each worker's partitions (as it reports them now), deliveries, and first and last delivery
    (seconds after the run's first)."""
    partition_of = partitioner(PARTITIONS)
    owner = {partition: k for k, held in enumerate(await owners(group)) for partition in held}
    out: list[dict[str, Any]] = [{"partitions": sorted(p for p, o in owner.items() if o == k), "delivered": 0}
                                 for k in range(len(group))]
    for hit in hits:
        held_by = owner.get(partition_of(ids[int(hit.path.removeprefix(prefix))]))
        if held_by is None:
            continue
        mine = out[held_by]
        mine["delivered"] += 1
        at = round(hit.at - t0, 3)
        mine["first_s"], mine["last_s"] = min(mine.get("first_s", at), at), max(mine.get("last_s", at), at)
    return out


async def drain(bench: Bench, result: dict[str, Any]) -> dict[str, Any]:
    """A backlog produced while no worker runs, drained by a worker that starts on it."""
    runs = []
    for repeat in range(bench.sizes["repeats"]):
        run, worker, ids, app_id = await drain_once(bench, repeat)
        runs.append(run)
        if repeat == bench.sizes["repeats"] - 1:  # the latency and ingest scenarios go on with it
            bench.app_id, bench.drain_worker, bench.drain_ids = app_id, worker, ids  # type: ignore[attr-defined]
        else:
            for other in bench.workers_of(app_id):
                other.stop()
    out = {**repeated(bench, runs, result), "workers": bench.workers}
    if "floor" in result:  # what the engine and its durable state add to the stack's own cost
        out["cpu_above_floor_s_per_1000"] = round(
            out["cpu_s_per_1000"]["median"] - result["floor"]["cpu_s_per_1000"]["median"], 3)
    return out


async def running_worker(bench: Bench, receivers: int) -> tuple[WorkerProcess, list[str]]:
    """The drain's worker and receivers if it ran, else a fresh worker with `receivers` receivers."""
    if hasattr(bench, "drain_worker"):
        return bench.drain_worker, bench.drain_ids  # type: ignore[attr-defined]
    app_id = new_app_id()
    worker = bench.worker(app_id, "paced")
    await worker.wait_ready()
    ids = await bench.register(app_id, worker, receivers, path="paced_")
    bench.app_id, bench.drain_worker, bench.drain_ids = app_id, worker, ids  # type: ignore[attr-defined]
    return worker, ids


async def latency(bench: Bench) -> dict[str, Any]:
    """`rate` messages a second through POST /v1/messages for `seconds`, round-robin over the receivers."""
    worker, ids = await running_worker(bench, bench.sizes["receivers"])
    return await paced(bench, worker, ids, bench.nginx)


async def paced(bench: Bench, worker: WorkerProcess, ids: list[str], nginx: NginxReceiver,
                tag: str = "lat") -> dict[str, Any]:
    """The latency scenario on a given worker, its receivers `ids` served by `nginx`."""
    rate, seconds = bench.sizes["rate"], bench.sizes["seconds"]
    api = Api(worker.url)
    answered: dict[str, tuple[float, float]] = {}  # msg id -> (call start, 202 received)
    payload = body_of(bench.sizes["body_bytes"])
    start_hits = len(nginx.read())
    try:
        async def send(n: int) -> None:
            rid = ids[n % len(ids)]
            msg_id = f"{tag}_{n}"
            body = {"receiver_id": rid, "event_type": "bench.paced", "payload": payload, "id": msg_id}
            t0 = time.time()
            status, _ = await api.call("POST", "/v1/messages", body)
            if status == 202:
                answered[msg_id] = (t0, time.time())

        tasks = []
        t_start = time.monotonic()
        for n in range(int(rate * seconds)):  # bounded: rate x seconds sends
            await asyncio.sleep(max(0.0, t_start + n / rate - time.monotonic()))
            tasks.append(asyncio.create_task(send(n)))
        await asyncio.gather(*tasks)

        def arrived() -> dict[str, Hit]:
            return first_arrivals(nginx.read()[start_hits:], answered)

        await wait_for(lambda: len(arrived()) >= len(answered), 60, "paced deliveries")
        await asyncio.sleep(0.2)
        found = arrived()
    finally:
        await api.close()
    # nginx's $msec is truncated to the millisecond: take the middle of that millisecond.
    from_answer = [found[m].at + 0.0005 - answered[m][1] for m in found]
    from_call = [found[m].at + 0.0005 - answered[m][0] for m in found]
    api_ms = [(b - a) for a, b in answered.values()]
    return {"rate": rate, "seconds": seconds, "sent": int(rate * seconds), "accepted": len(answered),
            "delivered": len(found), "from_api_answer": percentiles(from_answer),
            "from_api_call": percentiles(from_call), "api_answer": percentiles(api_ms)}


async def events(bench: Bench) -> dict[str, Any]:
    """`events` events at `event_rate` a second through POST /v1/events, each to `subscribers` receivers.

    Sparse on purpose: a platform's events often come a few a second, so the subscription feed that
    each fan-out syncs with is quiet between them (its poll at its idle wait). A worker of its own:
    the other scenarios' receivers subscribe to every event type.
    """
    worker = bench.worker(new_app_id(), "events")
    await worker.wait_ready()
    count, rate, subscribers = bench.sizes["events"], bench.sizes["event_rate"], bench.sizes["subscribers"]
    api = Api(worker.url)
    calls: dict[str, tuple[float, float]] = {}  # event id -> (call start, 202 received)
    start_hits = len(bench.nginx.read())
    try:
        known = (await worker.readyz())["subscriptions"]["receivers"]
        ids = [(await api.create_receiver(bench.nginx.url(f"ev_{i}"), event_types=["bench.event"]))["id"]
               for i in range(subscribers)]
        wanted = known + len(ids)
        await wait_for_read(lambda: worker.readyz(), lambda r: r["subscriptions"]["receivers"] >= wanted,
                            30.0, "the subscriptions")
        await asyncio.sleep(2.0)  # a quiet spell before the first event, as between sparse events
        t_start = time.monotonic()
        for n in range(count):  # bounded: `count` events
            await asyncio.sleep(max(0.0, t_start + n / rate - time.monotonic()))
            event_id = f"ev_{n}"
            t0 = time.time()
            status, _ = await api.call("POST", "/v1/events", {"event_type": "bench.event", "id": event_id,
                                                              "payload": {"n": n}})
            if status == 202:
                calls[event_id] = (t0, time.time())
        copies = {copy_id(e, rid): e for e in calls for rid in ids}

        def arrived() -> dict[str, Hit]:
            return first_arrivals(bench.nginx.read()[start_hits:], copies)

        await wait_for(lambda: len(arrived()) >= len(copies), 60, "every copy of the events")
        found = arrived()
    finally:
        await api.close()
        worker.stop()
    from_call = [found[c].at + 0.0005 - calls[e][0] for c, e in copies.items() if c in found]
    return {"events": count, "rate": rate, "subscribers": subscribers, "accepted": len(calls),
            "copies": len(copies), "delivered": len(found), "from_event_call": percentiles(from_call),
            "api_answer": percentiles([b - a for a, b in calls.values()])}


async def post_batches(url: str, batches: list[list[dict[str, Any]]], callers: int) -> float:
    """POST every batch, `callers` calls at a time; return the seconds it took."""
    api = Api(url)
    queue = list(batches)

    async def caller() -> None:
        while queue:
            await api.send_batch(queue.pop())

    try:
        t0 = time.perf_counter()
        await asyncio.gather(*(caller() for _ in range(callers)))
        return time.perf_counter() - t0
    finally:
        await api.close()


async def ingest(bench: Bench) -> dict[str, Any]:
    """Messages accepted per second through POST /v1/messages/batch (1,000 a call, 4 calls at once)."""
    worker, ids = await running_worker(bench, bench.sizes["receivers"])
    total = bench.sizes["ingest_messages"]
    payload = body_of(bench.sizes["body_bytes"])
    runs = []
    expected = len(bench.nginx.read())
    for repeat in range(bench.sizes["repeats"]):
        expected += total
        batches = [[{"receiver_id": ids[(b * 1000 + i) % len(ids)], "event_type": "bench.ingest",
                     "payload": payload} for i in range(1000)] for b in range(max(1, total // 1000))]
        runs.append(len(batches) * 1000 / await post_batches(worker.url, batches, 4))
        progress(f"  ingest run {repeat + 1}: {runs[-1]:,.0f} accepted/s")
    # Let the worker deliver what was accepted before the next scenario measures it.
    limit = max(120, total / 200)
    await wait_for(lambda: len(bench.nginx.read()) >= expected, limit, "the ingested messages")
    return {"messages": total, "batch": 1000, "concurrent_calls": 4, "accepted_per_s": spread(runs, 0)}


async def memory(bench: Bench) -> dict[str, Any]:
    """Worker RSS with 0, then more, idle registered receivers; then one paused receiver's backlog."""
    app_id = new_app_id()
    # What an idle worker holds: the heap a burst freed goes back to the OS at the next trim
    # (every 30 s by default), so trim every 2 s here and wait for one after each burst.
    worker = bench.worker(app_id, "memory", DISPATCHER_HEAP_TRIM_INTERVAL=str(HEAP_TRIM))
    await worker.wait_ready()
    assert worker.process is not None
    pid = worker.process.pid
    await asyncio.sleep(HEAP_TRIM + 2)
    points = [{"receivers": 0, "rss_mb": round(rss_bytes(pid) / 2**20, 1)}]
    progress(f"  RSS with no receivers: {points[0]['rss_mb']} MB")
    registered = 0
    for target in bench.sizes["idle_receivers"]:
        await bench.register(app_id, worker, target - registered, path="idle", start=registered)
        registered = target
        await asyncio.sleep(HEAP_TRIM + 2)
        points.append({"receivers": target, "rss_mb": round(rss_bytes(pid) / 2**20, 1)})
        progress(f"  RSS with {target:,} idle receivers: {points[-1]['rss_mb']} MB")
    for p in points[1:]:
        p["bytes_per_receiver"] = round((p["rss_mb"] - points[0]["rss_mb"]) * 2**20 / p["receivers"])
    # One receiver, paused, takes a backlog.
    api = Api(worker.url)
    try:
        holder = (await api.create_receiver(bench.nginx.url("backlog")))["id"]
        status, _ = await api.call("POST", f"/v1/receivers/{holder}/pause", {"reason": "bench"})
        assert status == 200
        await asyncio.sleep(1)
        before = rss_bytes(pid)
        count = bench.sizes["backlog"]
        t0 = time.perf_counter()
        await bench.produce_messages(app_id, [holder], count, body_of(bench.sizes["body_bytes"]))
        done = await wait_for_read(
            lambda: api.state(holder), lambda s: s["backlog"] >= count, max(120.0, count / 50),
            "the backlog taken in", lambda s: progress(f"  backlog {s['backlog']:,} of {count:,}"),
        )
        intake_s = time.perf_counter() - t0
        await asyncio.sleep(HEAP_TRIM + 2)
        after = rss_bytes(pid)
    finally:
        await api.close()
    worker.stop()
    return {"idle": points, "backlog": {"messages": count, "taken_in": done, "intake_s": round(intake_s, 1),
                                        "intake_per_s": round(count / intake_s),
                                        "rss_before_mb": round(before / 2**20, 1),
                                        "added_mb": round((after - before) / 2**20, 1)}}


async def recovery_once(bench: Bench, static: bool) -> dict[str, Any]:
    """kill -9 a worker holding `recovery_receivers` receivers; a new worker on the same disk takes over.

    `static`: both run with the same DISPATCHER_INSTANCE_ID (Kafka static membership, as a
    StatefulSet pod coming back), so the new one need not wait out the dead one's session.
    """
    count = bench.sizes["recovery_receivers"]
    app_id = new_app_id()
    env = {"DISPATCHER_INSTANCE_ID": "bench-worker-0"} if static else {}
    data = "recovery-static" if static else "recovery"
    worker = bench.worker(app_id, data, **env)
    await worker.wait_ready()
    ids = await bench.register(app_id, worker, count, path="rec_")
    worker.kill9()
    killed = time.time()
    progress(f"  killed the worker holding {count:,} receivers; starting another "
             f"({'same instance id' if static else 'no instance id'})")
    start_hits = len(bench.nginx.read())
    # One message to a receiver in each partition, waiting while no worker runs.
    partition_of = partitioner(PARTITIONS)
    targets: dict[int, str] = {}
    for rid in ids:
        targets.setdefault(partition_of(rid), rid)
    await bench.produce_messages(app_id, list(targets.values()), 1, body_of(256))
    new = bench.worker(app_id, data, **env)
    started = time.time()

    def firsts() -> list[Hit]:
        return [h for h in bench.nginx.read()[start_hits:] if h.path.startswith("rec_")]

    limit = 60.0 if count < 10_000 else 300.0
    await wait_for(lambda: bool(firsts()), limit, "the first delivery after kill -9", 0.005)
    first = min((h.at for h in firsts()), default=None)
    await new.wait_ready(600)
    ready = time.time()
    await wait_for(lambda: len(firsts()) >= len(targets), limit, "a delivery in every partition")
    new.stop()
    return {"receivers": count, "static_membership": static,
            "session_timeout_s": float(new.env().get("DISPATCHER_SESSION_TIMEOUT", 10)),
            "first_delivery_after_kill_s": round(first - killed, 2) if first else None,
            "first_delivery_after_start_s": round(first - started, 2) if first else None,
            "all_partitions_recovered_after_kill_s": round(ready - killed, 2),
            "partitions_delivered": len({h.path for h in firsts()})}


async def recovery(bench: Bench) -> dict[str, Any]:
    return {"dynamic": await recovery_once(bench, static=False),
            "static": await recovery_once(bench, static=True)}


# the run --------------------------------------------------------------------------


async def run(args: argparse.Namespace) -> dict[str, Any]:
    sizes = dict(QUICK if args.quick else FULL)
    if args.repeats:
        sizes["repeats"] = args.repeats
    chosen = [s for s in SCENARIOS + EXTRA_SCENARIOS if s in args.only]
    result: dict[str, Any] = {"at": time.time(), "quick": args.quick, "sizes": sizes, "cpus": os.cpu_count(),
                              "cpu": cpu_model(), "event_loop": type(asyncio.get_running_loop()).__module__}
    bench = Bench(args, sizes)
    bench.start()
    progress(f"broker {bench.broker.url}, nginx on 127.0.0.1:{bench.nginx.port}, scratch {bench.tmp}")
    try:
        for name in chosen:
            progress(f"{name} ...")
            t0 = time.monotonic()
            if name in ("floor", "drain"):
                result[name] = await globals()[name](bench, result)
            elif name in EXTRA_SCENARIOS:
                [module] = [m for m in EXTRA_MODULES if name in m.SCENARIOS]
                result[name] = await getattr(module, name)(bench)
            else:
                result[name] = await globals()[name](bench)
            result[name]["scenario_s"] = round(time.monotonic() - t0, 1)
            save(result, args.out)  # a run cut short keeps the scenarios it finished
    finally:
        bench.stop()
    return result


def cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown"


def print_table(result: dict[str, Any]) -> None:
    rows: list[tuple[str, str, str]] = []
    if "ceiling" in result:
        c = result["ceiling"]
        rows.append(("ceiling: bare aiohttp -> nginx", f"{c['per_s']['median']:,.0f}/s",
                     f"min {c['per_s']['min']:,.0f} max {c['per_s']['max']:,.0f}; "
                     f"client CPU {c['client_cpu_s_per_1000']['median']} s/1000"))
    if "floor" in result:
        f = result["floor"]
        rows.append(("floor: aiokafka consumer -> POST", f"{f['per_s']['median']:,.0f}/s",
                     f"min {f['per_s']['min']:,.0f} max {f['per_s']['max']:,.0f}; "
                     f"{f.get('ratio_to_ceiling', '-')} x ceiling; "
                     f"CPU {f['cpu_s_per_1000']['median']} s/1000; lost {f['lost']}"))
    if "drain" in result:
        d = result["drain"]
        label = "backlog drain" + (f" ({d['workers']} workers)" if d.get("workers", 1) > 1 else "")
        rows.append((label, f"{d['per_s']['median']:,.0f}/s",
                     f"min {d['per_s']['min']:,.0f} max {d['per_s']['max']:,.0f}; "
                     f"{d.get('ratio_to_ceiling', '-')} x ceiling"))
        above = d.get("cpu_above_floor_s_per_1000")
        rows.append(("  worker CPU per 1,000", f"{d['cpu_s_per_1000']['median']} s",
                     f"min {d['cpu_s_per_1000']['min']} max {d['cpu_s_per_1000']['max']}"
                     + ("" if above is None else f"; {above} s above the floor")))
        rows.append(("  lost / out of order / dup", f"{d['lost']} / {d['out_of_order']} / {d['duplicates']}",
                     f"{d['messages']:,} messages to {d['receivers']:,} receivers x {len(d['runs'])}"))
    if "latency" in result:
        lat = result["latency"]
        a = lat["from_api_answer"]
        rows.append((f"paced {lat['rate']}/s: API answer -> receiver",
                     f"p50 {a.get('p50_ms')} ms", f"p95 {a.get('p95_ms')} p99 {a.get('p99_ms')} "
                     f"max {a.get('max_ms')} ms; {lat['delivered']}/{lat['sent']} delivered"))
        b = lat["from_api_call"]
        rows.append(("  from the API call", f"p50 {b.get('p50_ms')} ms",
                     f"p99 {b.get('p99_ms')} ms (API answer p50 {lat['api_answer'].get('p50_ms')} ms)"))
    if "events" in result:
        ev = result["events"]
        c = ev["from_event_call"]
        rows.append((f"events {ev['rate']}/s x {ev['subscribers']} receivers: call -> copy",
                     f"p50 {c.get('p50_ms')} ms", f"p99 {c.get('p99_ms')} max {c.get('max_ms')} ms; "
                     f"API answer p50 {ev['api_answer'].get('p50_ms')} p99 {ev['api_answer'].get('p99_ms')}"
                     f" ms; {ev['delivered']}/{ev['copies']} copies"))
    if "ingest" in result:
        i = result["ingest"]["accepted_per_s"]
        rows.append(("ingest: POST /v1/messages/batch", f"{i['median']:,.0f}/s", f"min {i['min']:,.0f} "
                     f"max {i['max']:,.0f}"))
    if "memory" in result:
        m = result["memory"]
        for p in m["idle"]:
            extra = f"{p['bytes_per_receiver']} B/receiver" if "bytes_per_receiver" in p else "baseline"
            rows.append((f"RSS, {p['receivers']:,} idle receivers", f"{p['rss_mb']} MB", extra))
        b = m["backlog"]
        rows.append((f"RSS added by a {b['messages']:,} backlog", f"{b['added_mb']} MB",
                     f"intake {b['intake_per_s']:,}/s"))
    if "recovery" in result:
        for kind, label in (("dynamic", "new member"), ("static", "same instance id")):
            r = result["recovery"][kind]
            rows.append((f"kill -9, {r['receivers']:,} receivers ({label}): first delivery",
                         f"{r['first_delivery_after_kill_s']} s",
                         f"all partitions {r['all_partitions_recovered_after_kill_s']} s; "
                         f"session timeout {r['session_timeout_s']} s"))
    for module in EXTRA_MODULES:
        rows += module.table_rows(result)
    width = max(len(r[0]) for r in rows) + 2 if rows else 10
    print(f"\n{result.get('cpus')} x {result.get('cpu', '?')}, event loop {result.get('event_loop', '?')}")
    for label, value, detail in rows:
        print(f"{label:<{width}}{value:>16}   {detail}")


def precompile() -> None:
    """Write the tree's bytecode first, so each worker started here loads it as the image's does.

    Where PYTHONDONTWRITEBYTECODE is set, a worker would otherwise compile every module it imports
    at each start (what that cost: docs/benchmarks.md), and the restart gaps and start-to-first-delivery
    figures would carry it; the image compiles them when it is built. A tree that cannot be written
    is left as it is (quietly: the figures then carry the compile).
    """
    root = Path(__file__).resolve().parent.parent
    for package in ("dispatcher", "web", "bench"):
        compileall.compile_dir(root / package, quiet=2)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for the smoke test")
    parser.add_argument("--only", type=lambda s: s.split(","), default=list(SCENARIOS),
                        help="comma-separated scenarios: " + ",".join(SCENARIOS)
                        + " (the default), and " + ",".join(EXTRA_SCENARIOS)
                        + " (bench/perf2.py, bench/peers.py, bench/steady.py)")
    parser.add_argument("--repeats", type=int, help="runs of the repeated scenarios (default 3, quick 1)")
    parser.add_argument("--workers", type=int, default=1,
                        help="workers that drain the backlog together, and stay for the scenarios "
                             "after it (default 1)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    unknown = set(args.only) - set(SCENARIOS + EXTRA_SCENARIOS)
    if unknown:
        parser.error(f"--only: unknown scenario(s) {sorted(unknown)}")
    if args.workers < 1:
        parser.error("--workers: at least 1")
    if "peers" in args.only and peers.missing():
        parser.error(f"--only peers needs the bench extra (missing: {', '.join(peers.missing())}): "
                     "pip install -e '.[bench]'")
    precompile()
    # The bench (and so the ceiling's client) runs on the event loop the worker is given.
    result = run_on(worker_loop(), run(args))
    path = save(result, args.out)
    print_table(result)
    print(f"\nsaved {path}")
    return result
