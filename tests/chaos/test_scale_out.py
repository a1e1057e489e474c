"""Scale out and in under steady load, as a StatefulSet does it.

One run, three phases, ordered receivers under ~200 messages/s throughout:
1. three workers; a fourth joins; then one leaves by SIGTERM (Kubernetes' scale-down);
2. a rolling restart of the three left, one at a time, each back on its own data dir (a
   StatefulSet rollout: SIGTERM, then the same volume; the same instance id too with
   DISPATCHER_TEST_STATIC_MEMBERSHIP=1, see STATIC);
3. one worker back on an empty data dir (a lost volume): it rebuilds from the changelog.

At the end nothing accepted is lost, no receiver sees a seq out of order, no seq is given to two
message ids; the longest pause any receiver saw in each phase is printed (no timed assertion:
the figures go to docs/deploy.md).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
import time
from collections.abc import Callable

import pytest

from tests.chaos.test_kill9 import Load, audit
from tests.harness import Api, Delivery, Receiver, WorkerProcess, first_copies, wait_assigned

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

RECEIVERS = 24
PARTITIONS = 8
SETTLE_S = 3.0  # load carried on after each step, so the pause after it is measured under load
# Each worker under its own static-membership id, as in the chart. Opt-in: with three or more
# static members the embedded broker (Tansu 0.6) keeps answering one member's heartbeats with
# UNKNOWN_MEMBER_ID after each assignment, so the group rebalances every ~7 s for as long as they
# run, and a static member that left by SIGTERM is never expired (its partitions stayed with it
# for the 120 s this test waits; Kafka expires it after the session timeout). Without it each
# worker still comes back on its own data dir.
STATIC = os.environ.get("DISPATCHER_TEST_STATIC_MEMBERSHIP", "") == "1"


async def create(api: Api, url: str, name: str) -> str:
    """Create a receiver; a group still settling may answer `pending` (applied later): ask again."""
    for _ in range(120):  # bounded: about a minute
        status, body = await api.call("POST", "/v1/receivers", {"url": url, "id": name})
        if status in (200, 201):
            return str(body["id"])
        if body["error"]["code"] == "conflict":  # an earlier try was applied after all
            return name
        assert body["error"]["code"] in ("pending", "unavailable"), body
        await asyncio.sleep(0.5)
    raise AssertionError(f"receiver {name} not created")


def longest_pause(deliveries: list[Delivery], since: float, until: float) -> tuple[float, str]:
    """The longest gap between two first deliveries of one receiver, ending within [since, until]."""
    by_path: dict[str, list[float]] = {}
    for d in first_copies(deliveries):
        by_path.setdefault(d.path, []).append(d.at)
    worst, where = 0.0, ""
    for path, times in by_path.items():
        for before, after in itertools.pairwise(times):
            if since <= after <= until and after - before > worst:
                worst, where = after - before, path
    return worst, where


async def test_scale_out_rolling_restart_and_lost_volume(make_worker: Callable[..., WorkerProcess]) -> None:
    recv = await Receiver().start()
    start_worker = make_worker  # each worker: its own data dir (and instance id, see STATIC)

    def pod(name: str) -> WorkerProcess:
        static = {"DISPATCHER_INSTANCE_ID": name} if STATIC else {}
        return start_worker(name, DISPATCHER_PARTITIONS=str(PARTITIONS), **static)

    workers = [pod(f"wd-{i}") for i in range(3)]
    for w in workers:
        w.start()
    for w in workers:
        await w.wait_ready()
    await wait_assigned(workers, "three workers sharing the partitions", PARTITIONS)
    api = Api(workers[0].url)
    names = [f"r{i}" for i in range(RECEIVERS)]
    rids = [await create(api, recv.url(name), name) for name in names]
    await api.close()

    live = list(workers)  # the load goes to these only: a Service sends nothing to a pod not ready
    load = Load(live, rids)
    stop = asyncio.Event()
    sender = asyncio.create_task(load.run(stop))
    phases: list[tuple[str, float, float]] = []
    try:
        await asyncio.sleep(SETTLE_S)
        began = time.time()
        fourth = pod("wd-3").start()
        await fourth.wait_ready(120)
        live.append(fourth)
        spread = await wait_assigned(live, "four workers sharing the partitions", PARTITIONS)
        print(f"\nscale 3 -> 4: {spread}", flush=True)
        await asyncio.sleep(SETTLE_S)
        leaving = live.pop(1)
        leaving.stop()  # SIGTERM: the clean stop hands its partitions over
        assert leaving.process is not None and leaving.process.returncode == 0, "a clean stop exits 0"
        spread = await wait_assigned(live, "three workers after one left", PARTITIONS)
        print(f"scale 4 -> 3 (SIGTERM {leaving.data_dir.name}): {spread}", flush=True)
        await asyncio.sleep(SETTLE_S)
        phases.append(("join, then leave by SIGTERM", began, time.time()))

        began = time.time()
        for i in range(len(live)):
            w = live.pop(i)
            w.stop()
            w.start()  # same instance id, same data dir
            await w.wait_ready(120)
            live.insert(i, w)
            await wait_assigned(live, f"{w.data_dir.name} back after its restart", PARTITIONS)
        await asyncio.sleep(SETTLE_S)
        phases.append(("rolling restart of three", began, time.time()))

        began = time.time()
        lost_volume = live.pop(0)
        lost_volume.kill9()
        shutil.rmtree(lost_volume.data_dir)
        lost_volume.start()
        await lost_volume.wait_ready(120)
        live.insert(0, lost_volume)
        await wait_assigned(live, "the worker back on an empty data dir", PARTITIONS)
        await asyncio.sleep(SETTLE_S)
        phases.append(("kill -9, back on an empty volume", began, time.time()))
    finally:
        stop.set()
        await sender

    seen = await audit(recv, names, load, live[0], 120)
    lost, out_of_order, reused, duplicates = seen.lost, seen.out_of_order, seen.reused, seen.duplicates
    print(
        f"scale-out chaos (static membership: {STATIC}): accepted={len(load.accepted)} "
        f"refused_batches={load.refused} lost={len(lost)} "
        f"out_of_order={out_of_order} seqs_reused={reused} duplicates={duplicates}",
        flush=True,
    )
    for what, since, until in phases:
        pause, where = longest_pause(recv.deliveries, since, until)
        print(f"  {what}: longest pause {pause:.2f} s ({where}, {until - since:.1f} s phase)", flush=True)
    await recv.stop()
    assert lost == set()
    assert out_of_order == 0
    assert reused == 0
    assert all(w.process is not None and w.process.poll() is None for w in live), "a worker died on its own"
    for w in [*workers, fourth]:
        crashes = [line for line in w.log_path.read_text().splitlines() if "Crashed reason" in line]
        assert crashes == [], crashes
