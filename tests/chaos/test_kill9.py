"""kill -9 workers under steady load: nothing accepted is lost, nothing goes out of order."""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass

import aiohttp
import pytest

from tests.harness import (
    WITHOUT_BROKER_WORKAROUNDS,
    Api,
    Receiver,
    WorkerProcess,
    first_copies,
    wait_assigned,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

RECEIVERS = 40
KILLS = 5


class Load:
    """Sends batches round-robin to live workers; remembers what got a 202."""

    def __init__(self, workers: list[WorkerProcess], receiver_ids: list[str]) -> None:
        self.workers = workers
        self.receiver_ids = receiver_ids
        self.accepted: dict[str, str] = {}  # msg id -> receiver id
        self.refused = 0
        self._n = 0

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self.send_one_batch()
            await asyncio.sleep(0.2)  # ~200 messages/s: under the embedded broker's capacity

    def batch(self) -> list[dict[str, object]]:
        return [
            {"receiver_id": rid, "event_type": "t.x", "payload": {"n": self._n}, "id": f"m{self._n}-{i}"}
            for i, rid in enumerate(self.receiver_ids)
        ]

    async def send_one_batch(self) -> None:
        self._n += 1
        batch = self.batch()
        worker = self.workers[self._n % len(self.workers)]
        api = Api(worker.url)
        try:
            status, _ = await asyncio.wait_for(
                api.call("POST", "/v1/messages/batch", {"messages": batch}), 10
            )
        except (aiohttp.ClientError, TimeoutError, OSError):
            status = 0
        finally:
            await api.close()
        if status == 202:
            self.accepted.update({m["id"]: m["receiver_id"] for m in batch})
        else:
            self.refused += 1


async def report_missing(worker: WorkerProcess, load: Load, delivered: set[str]) -> None:
    """Print what a timed-out drain was still waiting for: per receiver, the ids and its state."""
    missing: dict[str, list[str]] = {}
    for msg_id, rid in load.accepted.items():
        if msg_id not in delivered:
            missing.setdefault(rid, []).append(msg_id)
    api = Api(worker.url)
    try:
        for rid, ids in sorted(missing.items()):
            status, body = await api.call("GET", f"/v1/receivers/{rid}")
            print(f"\nmissing {len(ids)} for {rid} (first {ids[:3]}): {status} {body and body.get('state')}")
    finally:
        await api.close()


@dataclass(frozen=True)
class Audit:
    lost: set[str]
    out_of_order: int  # receivers whose first copies are not seqs 1..n in order
    reused: int  # seqs given to more than one message id
    duplicates: int  # requests beyond each message's first copy


async def audit(recv: Receiver, names: list[str], load: Load, worker: WorkerProcess, limit: float) -> Audit:
    """Wait (at most `limit` s) for every accepted message, then count what the receivers saw.

    A duplicate that changed its seq fails at once: a message keeps its seq on every copy.
    """

    def delivered_ids() -> set[str]:
        return {d.msg_id for d in recv.completed}

    try:
        await wait_until(lambda: set(load.accepted) <= delivered_ids(), limit, "every accepted message")
    except AssertionError:
        await report_missing(worker, load, delivered_ids())
        raise
    out_of_order = reused = 0
    for name in names:
        mine = recv.by_path(name)
        ids_of_seq: dict[int, set[str]] = {}
        for d in mine:
            ids_of_seq.setdefault(d.seq, set()).add(d.msg_id)
        reused += sum(1 for ids in ids_of_seq.values() if len(ids) > 1)  # one seq, several messages
        firsts = first_copies(mine)
        if [d.seq for d in firsts] != list(range(1, len(firsts) + 1)):
            out_of_order += 1
        seq_of = {d.msg_id: d.seq for d in firsts}
        changed = [(d.msg_id, seq_of[d.msg_id], d.seq, d.at) for d in mine if seq_of[d.msg_id] != d.seq]
        assert changed == [], f"a duplicate changed its seq (id, first seq, seq, at) for {name}"
    duplicates = len(recv.deliveries) - len(first_copies(recv.deliveries))
    return Audit(set(load.accepted) - delivered_ids(), out_of_order, reused, duplicates)


@pytest.mark.parametrize("workarounds", ["embedded", "off"])
async def test_kill9_five_times_loses_nothing_and_keeps_order(make_worker, workarounds: str) -> None:
    """With the embedded broker's settings group (`dev`'s), and without it, as on Kafka: the
    invariants must not depend on a setting a user can forget."""
    rng = random.Random(11)
    recv = await Receiver().start()
    env = WITHOUT_BROKER_WORKAROUNDS if workarounds == "off" else {}
    workers = [make_worker("a", **env), make_worker("b", **env)]
    for w in workers:
        w.start()
    for w in workers:
        await w.wait_ready()
    # A create while the group still splits the partitions may answer `unavailable`.
    await wait_assigned(workers, "a and b sharing the partitions")
    api = Api(workers[0].url)
    names = [f"r{i}" for i in range(RECEIVERS)]
    rids = [(await api.create_receiver(recv.url(name), id=name))["id"] for name in names]
    await api.close()

    load = Load(workers, rids)
    stop = asyncio.Event()
    sender = asyncio.create_task(load.run(stop))
    try:
        for kill in range(KILLS):
            await asyncio.sleep(rng.uniform(1.0, 4.0))
            # Losing one worker must never take the other down with it.
            assert [w.process.poll() for w in workers] == [None, None], "a worker died on its own"
            victim = rng.choice(workers)
            victim.kill9()
            print(f"\nkill -9 #{kill + 1}: worker {victim.data_dir.name} at {time.time():.1f}", flush=True)
            await asyncio.sleep(rng.uniform(0.5, 3.0))
            victim.start()
            await victim.wait_ready(120)
        await asyncio.sleep(2)
    finally:
        stop.set()
        await sender

    seen = await audit(recv, names, load, workers[0], 180)
    lost, out_of_order, reused, duplicates = seen.lost, seen.out_of_order, seen.reused, seen.duplicates
    print(
        f"\nkill -9 x{KILLS}: accepted={len(load.accepted)} refused_batches={load.refused} "
        f"lost={len(lost)} out_of_order={out_of_order} seqs_reused={reused} duplicates={duplicates} "
        f"(broker workarounds: {workarounds})",
        flush=True,
    )
    await recv.stop()
    assert lost == set()
    assert out_of_order == 0
    assert reused == 0
    assert [w.process.poll() for w in workers] == [None, None], "a worker died on its own"
    for w in workers:
        crashes = [line for line in w.log_path.read_text().splitlines() if "Crashed reason" in line]
        assert crashes == [], crashes
