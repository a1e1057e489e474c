"""Real-world delivery, two workers and restart gaps: the suite's scenarios of issue 28.

Each runs in the suite's run (`python -m bench --only tls,hosts,workers,restart`), beside its
own ceiling where it has one, repeats interleaved so that a slow spell of the machine hits both:

tls       nginx speaking HTTPS with a certificate of a test CA (`trustme`); the ceiling (bare
          aiohttp) and the worker (`DISPATCHER_CA_FILE`) trust that CA; then the paced run
hosts     the receivers spread over ORIGINS distinct address:port origins on loopback (20
          addresses of 127.0.1.0/24, 5 ports each), so per-origin connections and per-host slots
          count; the worker keeps its default per-host limit; then the paced run
workers   the drain by one worker and by two workers in one consumer group, beside the ceiling
restart   a worker holding the receivers, fed a paced stream straight to Kafka, is stopped with
          SIGTERM and started again on its disk: seconds from the stop to the next delivery, with
          and without DISPATCHER_INSTANCE_ID; every message of the stream delivered, in order
handover  two workers share the receivers and a drained backlog of history; under a paced
          stream one is stopped for good (a scale-down): seconds until the other delivers on
          every partition it took over, without and with standby copies (not in the embedded
          broker's default set: `python -m bench --only handover`)
"""

from __future__ import annotations

import asyncio
import ssl
import time
from typing import TYPE_CHECKING, Any

import trustme

from dispatcher.broker import free_port, free_ports
from dispatcher.domain.ids import new_id
from dispatcher.domain.records import Message, encode_message_record
from dispatcher.partitioning import partitioner
from tests.harness import WorkerProcess, new_app_id

from .nginx import Hit, NginxReceiver

if TYPE_CHECKING:
    from .suite import Bench

SCENARIOS = ("tls", "hosts", "workers", "restart", "handover")
ADDRESSES, PORTS_EACH = 20, 5  # the hosts scenario's origins: 20 loopback addresses x 5 ports
ORIGINS = ADDRESSES * PORTS_EACH


def _suite() -> Any:
    from . import suite  # the suite imports this module: its helpers are read at call time

    return suite


def ratio(a: float, b: float) -> float:
    return round(a / b, 3) if b else 0.0


async def side_by_side(bench: Bench, tag: str, receiver: NginxReceiver, url: Any,
                       ssl_context: ssl.SSLContext | None, env: dict[str, str]) -> dict[str, Any]:
    """Ceiling and drain over the same receiver, interleaved, then the paced run on the last worker."""
    suite = _suite()
    ceilings, drains = [], []
    worker: WorkerProcess | None = None
    ids: list[str] = []
    for repeat in range(bench.sizes["repeats"]):
        ceilings.append(await suite.ceiling_once(bench, f"{tag}ceiling{repeat}_", url, ssl_context))
        suite.progress(f"  {tag} ceiling run {repeat + 1}: {ceilings[-1]['per_s']:,.0f}/s")
        if worker is not None:
            _stop_app(bench, worker.app_id)
        run, worker, ids, _ = await suite.drain_once(bench, repeat, tag, receiver, workers=1, env=env,
                                                     url=url)
        drains.append(run)
    assert worker is not None
    latency = await suite.paced(bench, worker, ids, receiver, tag=f"{tag}paced")
    _stop_app(bench, worker.app_id)
    ceiling = suite.ceiling_figures(bench, ceilings)
    drain = suite.repeated(bench, drains, {"ceiling": ceiling})
    return {"ceiling": ceiling, "drain": drain, "latency": latency,
            "cpu_ratio_to_ceiling": ratio(drain["cpu_s_per_1000"]["median"],
                                          ceiling["client_cpu_s_per_1000"]["median"])}


def _stop_app(bench: Bench, app_id: str) -> None:
    for other in bench.workers_of(app_id):
        other.stop()


async def tls(bench: Bench) -> dict[str, Any]:
    """HTTPS receivers: nginx with a certificate of a test CA that the ceiling and the worker trust."""
    ca = trustme.CA()
    ca_file, chain = bench.tmp / "tls-ca.pem", bench.tmp / "tls-server.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(str(chain))
    receiver = NginxReceiver(bench.tmp / "nginx-tls", free_port(), tls_chain=chain).start()
    try:
        context = ssl.create_default_context(cafile=str(ca_file))
        return await side_by_side(bench, "tls", receiver, receiver.url, context,
                                  {"DISPATCHER_CA_FILE": str(ca_file), "DISPATCHER_REQUIRE_HTTPS": "true"})
    finally:
        receiver.stop()


def loopback_origins(addresses: int, ports_each: int) -> list[tuple[str, int]]:
    """`addresses` x `ports_each` free (address, port) pairs on 127.0.1.0/24."""
    return [(host, port) for host in (f"127.0.1.{a + 1}" for a in range(addresses))
            for port in free_ports(ports_each, host)]


async def hosts(bench: Bench) -> dict[str, Any]:
    """The receivers spread over ORIGINS distinct origins, receiver i on origin i mod ORIGINS."""
    origins = loopback_origins(ADDRESSES, PORTS_EACH)
    receiver = NginxReceiver(bench.tmp / "nginx-hosts", origins[0][1], origins=origins).start()

    def url(path: str) -> str:
        return receiver.origin_url(int(path.rsplit("_", 1)[1]), path)

    try:
        # The worker's default per-host limit (64): 1,000 receivers over 20 hosts is 50 a host.
        env = {"DISPATCHER_ALLOW_TARGETS": "127.0.1.0/24", "DISPATCHER_HOST_LIMIT": "64"}
        out = await side_by_side(bench, "hosts", receiver, url, None, env)
    finally:
        receiver.stop()
    return {**out, "origins": ORIGINS, "addresses": ADDRESSES}


async def workers(bench: Bench) -> dict[str, Any]:
    """The drain by one worker and by two in one group, each repeat beside a ceiling run."""
    suite = _suite()
    ceilings: list[dict[str, float]] = []
    runs: dict[int, list[dict[str, Any]]] = {1: [], 2: []}
    for repeat in range(bench.sizes["repeats"]):
        ceilings.append(await suite.ceiling_once(bench, f"wceiling{repeat}_"))
        suite.progress(f"  workers ceiling run {repeat + 1}: {ceilings[-1]['per_s']:,.0f}/s")
        for count in (1, 2):
            run, _, _, app_id = await suite.drain_once(bench, repeat, f"w{count}drain", workers=count)
            runs[count].append(run)
            _stop_app(bench, app_id)
    ceiling = suite.ceiling_figures(bench, ceilings)
    one, two = (suite.repeated(bench, runs[k], {"ceiling": ceiling}) for k in (1, 2))
    return {"ceiling": ceiling, "one": one, "two": two,
            "two_over_one": ratio(two["per_s"]["median"], one["per_s"]["median"]),
            "cpu_ratio_one_to_ceiling": ratio(one["cpu_s_per_1000"]["median"],
                                              ceiling["client_cpu_s_per_1000"]["median"])}


class Stream:
    """Messages produced straight to the requests topic at `rate`/s, round-robin over the receivers."""

    def __init__(self, bench: Bench, app_id: str, ids: list[str], rate: float) -> None:
        self.bench, self.app_id, self.ids, self.rate = bench, app_id, ids, rate
        self.counts = dict.fromkeys(ids, 0)
        self.sent = 0
        self.stopping = asyncio.Event()

    async def run(self) -> None:
        payload = _suite().body_of(256)
        async with self.bench.producer() as producer:
            start = time.monotonic()
            while not self.stopping.is_set():
                rid = self.ids[self.sent % len(self.ids)]
                msg = Message(new_id("msg"), rid, "bench.restart", payload, {}, time.time())
                await producer.send_and_wait(f"{self.app_id}.requests", encode_message_record(msg),
                                             rid.encode())
                self.counts[rid] += 1
                self.sent += 1
                await asyncio.sleep(max(0.0, start + self.sent / self.rate - time.monotonic()))


async def restart_once(bench: Bench, static: bool, repeat: int = 0) -> dict[str, Any]:
    """SIGTERM the worker under a paced stream, start it again on its disk; time the gap.

    Each repeat has a data dir of its own: a worker's tables belong to its app id (one's
    RocksDB under another's changelog is a ConsistencyError at start)."""
    suite = _suite()
    count, rate = bench.sizes["receivers"], float(bench.sizes["rate"])
    app_id = new_app_id()
    env = {"DISPATCHER_INSTANCE_ID": "bench-restart-0"} if static else {}
    data = f"restart{repeat}" + ("-static" if static else "")
    worker = bench.worker(app_id, data, **env)
    await worker.wait_ready()
    prefix = f"{data}_"
    ids = await bench.register(app_id, worker, count, path=prefix)
    first_hit = len(bench.nginx.read())

    def mine() -> list[Hit]:
        return [h for h in bench.nginx.read()[first_hit:] if h.path.startswith(prefix)]

    stream = Stream(bench, app_id, ids, rate)
    feeding = asyncio.create_task(stream.run())
    try:
        await suite.wait_for(lambda: len(mine()) >= rate, 60, "a second of the stream delivered")
        stopped = time.time()
        await asyncio.to_thread(worker.stop)
        exited = time.time()
        new = bench.worker(app_id, data, port=worker.port, **env)  # as a pod comes back: same address
        started = time.time()
        await suite.wait_for(lambda: any(h.at > exited for h in mine()), 120, "a delivery after the restart",
                             0.005)
        await suite.wait_for(lambda: len({h.path for h in mine() if h.at > exited}) >= len(ids), 60,
                             "a delivery to every receiver after the restart")
        await new.wait_ready()
        ready = time.time()
    finally:
        stream.stopping.set()
        await feeding
    await suite.wait_for(lambda: len({h.msg_id for h in mine()}) >= stream.sent, 120, "the stream delivered")
    await asyncio.sleep(0.2)  # the access log flushes every 50 ms
    times = {"stopped": stopped, "exited": exited, "started": started, "ready": ready}
    out = {"receivers": count, "rate": rate, "static_membership": static,
           "session_timeout_s": float(new.env().get("DISPATCHER_SESSION_TIMEOUT", 10)),
           **gap_figures(mine(), ids, prefix, times), "sent": stream.sent,
           **suite.order_report(mine(), {f"{prefix}{i}": stream.counts[rid] for i, rid in enumerate(ids)})}
    kind = "same instance id" if static else "no instance id"
    suite.progress(f"  restart ({kind}): stop took {out['stop_s']} s, next delivery "
                   f"{out['stop_to_next_delivery_s']} s after the SIGTERM "
                   f"({out['start_to_first_delivery_s']} s after the start), "
                   f"every partition {out['stop_to_every_partition_s']} s; "
                   f"lost {out['lost']}, out of order {out['out_of_order']}")
    new.stop()
    return out


def first_after(hits: list[Hit], ids: list[str], prefix: str, moment: float) -> dict[int, float]:
    """Each partition's first delivery after `moment` (of the partitions that had one)."""
    partition_of = partitioner(_suite().PARTITIONS)
    firsts: dict[int, float] = {}
    for h in sorted(hits, key=lambda h: h.at):
        if h.at > moment:
            firsts.setdefault(partition_of(ids[int(h.path.removeprefix(prefix))]), h.at)
    return firsts


def gap_figures(hits: list[Hit], ids: list[str], prefix: str, times: dict[str, float]) -> dict[str, Any]:
    """A restart's figures from its deliveries (`times`: when it was stopped, exited, started, ready)."""
    stopped, exited = times["stopped"], times["exited"]
    before = [h.at for h in hits if h.at <= exited]
    after = [h.at for h in hits if h.at > exited]
    first = min(after) if after else None
    firsts = first_after(hits, ids, prefix, exited)
    return {"stop_s": round(exited - stopped, 2),
            "stop_to_next_delivery_s": round(first - stopped, 2) if first else None,
            "start_to_first_delivery_s": round(first - times["started"], 2) if first else None,
            "last_delivery_before_stop_s": round(max(before) - stopped, 3) if before else None,
            "stop_to_every_partition_s": round(max(firsts.values()) - stopped, 2) if firsts else None,
            "stop_to_ready_s": round(times["ready"] - stopped, 2)}


async def restart(bench: Bench) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {"dynamic": [], "static": []}
    for repeat in range(bench.sizes["repeats"]):
        runs["dynamic"].append(await restart_once(bench, static=False, repeat=repeat))
        runs["static"].append(await restart_once(bench, static=True, repeat=repeat))
    suite = _suite()
    out: dict[str, Any] = {}
    for kind, rs in runs.items():
        gaps = [r["stop_to_next_delivery_s"] for r in rs if r["stop_to_next_delivery_s"] is not None]
        out[kind] = {"stop_to_next_delivery_s": suite.spread(gaps, 2) if gaps else None,
                     "lost": sum(r["lost"] for r in rs), "out_of_order": sum(r["out_of_order"] for r in rs),
                     "duplicates": sum(r["duplicates"] for r in rs), "runs": rs}
    return out


async def settled(group: list[WorkerProcess], limit: float) -> list[list[int]]:
    """Wait (at most `limit` s) until every worker holds partitions and together they hold them all."""
    suite = _suite()
    deadline = time.monotonic() + limit
    while True:
        held = await suite.owners(group)
        if all(held) and sorted(p for ps in held for p in ps) == list(range(suite.PARTITIONS)):
            return held
        if time.monotonic() > deadline:
            raise TimeoutError(f"the group did not settle within {limit:.0f} s: {held}")
        await asyncio.sleep(0.2)


async def handover_once(bench: Bench, standby: int, repeat: int = 0) -> dict[str, Any]:
    """Two workers, a drained history, a paced stream; SIGTERM one for good and time the takeover.

    The history is written while the second worker owns its half, so the survivor's own copy
    of that half is what it held before the second joined: without standby copies it reads
    the half's history from the changelog when it takes it back; with them it follows the
    changelog all along and reads only the tail."""
    suite = _suite()
    count, rate = bench.sizes["receivers"], float(bench.sizes["rate"])
    app_id = new_app_id()
    env = {"DISPATCHER_STANDBY_REPLICAS": str(standby)}
    data = f"handover{repeat}-standby{standby}"
    first = bench.worker(app_id, data, **env)
    await first.wait_ready()
    prefix = f"{data}_"
    ids = await bench.register(app_id, first, count, path=prefix)
    second = bench.worker(app_id, data + "w1", **env)
    await second.wait_ready()
    held = await settled([first, second], 120)
    first_hit = len(bench.nginx.read())

    def mine() -> list[Hit]:
        return [h for h in bench.nginx.read()[first_hit:] if h.path.startswith(prefix)]

    history = await bench.produce_messages(app_id, ids, bench.sizes["messages"] // count,
                                           suite.body_of(bench.sizes["body_bytes"]))
    await suite.wait_for(lambda: len(mine()) >= sum(history.values()), 600, "the history delivered")
    stream = Stream(bench, app_id, ids, rate)
    feeding = asyncio.create_task(stream.run())
    before = len(mine())
    partition_of = partitioner(suite.PARTITIONS)
    moved = set(held[1]) & {partition_of(rid) for rid in ids}  # the second's partitions with receivers
    try:
        await suite.wait_for(lambda: len(mine()) - before >= rate, 60, "a second of the stream delivered")
        stopped = time.time()
        await asyncio.to_thread(second.stop)
        exited = time.time()
        await suite.wait_for(lambda: moved <= set(first_after(mine(), ids, prefix, exited)), 120,
                             "a delivery on every partition taken over")
    finally:
        stream.stopping.set()
        await feeding
    expected = {f"{prefix}{i}": history[rid] + stream.counts[rid] for i, rid in enumerate(ids)}
    await suite.wait_for(lambda: len({h.msg_id for h in mine()}) >= sum(expected.values()), 120,
                         "the stream delivered")
    await asyncio.sleep(0.2)  # the access log flushes every 50 ms
    firsts = {p: at for p, at in first_after(mine(), ids, prefix, exited).items() if p in moved}
    out = {"receivers": count, "rate": rate, "standby_replicas": standby, "history": sum(history.values()),
           "partitions_moved": sorted(moved), "stop_s": round(exited - stopped, 2),
           "stop_to_first_moved_delivery_s": round(min(firsts.values()) - stopped, 2) if firsts else None,
           "stop_to_every_moved_partition_s": round(max(firsts.values()) - stopped, 2) if firsts else None,
           "sent": stream.sent, **suite.order_report(mine(), expected)}
    suite.progress(f"  handover (standby replicas {standby}): stop took {out['stop_s']} s, the survivor "
                   f"delivered on the first partition it took over {out['stop_to_first_moved_delivery_s']} s "
                   f"after the SIGTERM, on all {len(firsts)} {out['stop_to_every_moved_partition_s']} s; "
                   f"lost {out['lost']}, out of order {out['out_of_order']}")
    first.stop()
    return out


async def handover(bench: Bench) -> dict[str, Any]:
    runs: dict[int, list[dict[str, Any]]] = {0: [], 1: []}
    for repeat in range(bench.sizes["repeats"]):
        for standby in runs:
            runs[standby].append(await handover_once(bench, standby, repeat))
    suite = _suite()
    out: dict[str, Any] = {}
    for standby, rs in runs.items():
        gaps = [gap for r in rs if (gap := r["stop_to_every_moved_partition_s"]) is not None]
        out[f"standby_{standby}"] = {
            "stop_to_every_moved_partition_s": suite.spread(gaps, 2) if gaps else None,
            "lost": sum(r["lost"] for r in rs), "out_of_order": sum(r["out_of_order"] for r in rs),
            "duplicates": sum(r["duplicates"] for r in rs), "runs": rs}
    return out


def table_rows(result: dict[str, Any]) -> list[tuple[str, str, str]]:
    """The suite's printed rows of these scenarios."""
    rows: list[tuple[str, str, str]] = []
    for name, label in (("tls", "TLS"), ("hosts", f"{ORIGINS} origins")):
        if name not in result:
            continue
        r = result[name]
        c, d, lat = r["ceiling"], r["drain"], r["latency"]["from_api_answer"]
        rows.append((f"{label}: ceiling", f"{c['per_s']['median']:,.0f}/s",
                     f"client CPU {c['client_cpu_s_per_1000']['median']} s/1000"))
        rows.append((f"{label}: drain", f"{d['per_s']['median']:,.0f}/s",
                     f"{d.get('ratio_to_ceiling')} x ceiling; CPU {d['cpu_s_per_1000']['median']} s/1000 "
                     f"({r['cpu_ratio_to_ceiling']} x the ceiling's); lost {d['lost']}, "
                     f"out of order {d['out_of_order']}"))
        rows.append((f"{label}: paced {r['latency']['rate']}/s", f"p50 {lat.get('p50_ms')} ms",
                     f"p99 {lat.get('p99_ms')} ms; "
                     f"{r['latency']['delivered']}/{r['latency']['sent']} delivered"))
    if "workers" in result:
        w = result["workers"]
        rows.append(("workers: ceiling", f"{w['ceiling']['per_s']['median']:,.0f}/s",
                     f"client CPU {w['ceiling']['client_cpu_s_per_1000']['median']} s/1000"))
        for key, label in (("one", "1 worker"), ("two", "2 workers")):
            d = w[key]
            rows.append((f"workers: drain, {label}", f"{d['per_s']['median']:,.0f}/s",
                         f"{d.get('ratio_to_ceiling')} x ceiling; "
                         f"CPU {d['cpu_s_per_1000']['median']} s/1000; "
                         f"lost {d['lost']}, out of order {d['out_of_order']}"))
        rows.append(("workers: 2 over 1", f"{w['two_over_one']} x", ""))
    if "restart" in result:
        for kind, label in (("dynamic", "no instance id"), ("static", "same instance id")):
            r = result["restart"][kind]
            gap = r["stop_to_next_delivery_s"]
            rows.append((f"restart ({label}): SIGTERM -> next delivery",
                         f"{gap['median']} s" if gap else "-",
                         (f"min {gap['min']} max {gap['max']}; " if gap else "")
                         + f"lost {r['lost']}, out of order {r['out_of_order']}"))
    if "handover" in result:
        for standby in (0, 1):
            r = result["handover"][f"standby_{standby}"]
            gap = r["stop_to_every_moved_partition_s"]
            rows.append((f"handover (standby replicas {standby}): SIGTERM -> all taken over",
                         f"{gap['median']} s" if gap else "-",
                         (f"min {gap['min']} max {gap['max']}; " if gap else "")
                         + f"lost {r['lost']}, out of order {r['out_of_order']}"))
    return rows

