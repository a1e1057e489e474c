"""kill -9 workers under load on key-ordered receivers: nothing lost, no key's message before an
earlier one of its key got its 2xx, seqs contiguous."""

from __future__ import annotations

import asyncio
import random
import time

import pytest

from tests.chaos.test_kill9 import Load, report_missing
from tests.harness import Api, WorkerProcess, wait_assigned, wait_until
from tests.keyed import KeyedReceiver

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

RECEIVERS = 8
KEYS = 5
KILLS = 3


class KeyedLoad(Load):
    """Three messages per receiver per batch, each under one of KEYS keys (named in the payload too)."""

    def __init__(self, workers: list[WorkerProcess], receiver_ids: list[str], seed: int) -> None:
        super().__init__(workers, receiver_ids)
        self._rng = random.Random(seed)

    def batch(self) -> list[dict[str, object]]:
        out: list[dict[str, object]] = []
        for i, rid in enumerate(self.receiver_ids):
            for j in range(3):
                key = f"key{self._rng.randrange(KEYS)}"
                out.append({"receiver_id": rid, "event_type": "t.keyed", "id": f"m{self._n}-{i}-{j}",
                            "payload": {"k": key, "n": self._n}, "ordering_key": key})
        return out


async def test_kill9_keeps_each_keys_order_and_loses_nothing(make_worker) -> None:
    rng = random.Random(23)
    fails = random.Random(5)
    # Some answers fail (503) so retries, parking and crashes overlap.
    recv = await KeyedReceiver(seed=3, max_delay=0.05, fail=lambda d, k: fails.random() < 0.05).start()
    workers = [make_worker("a"), make_worker("b")]
    for w in workers:
        w.start()
    for w in workers:
        await w.wait_ready()
    # A create while the group still splits the partitions may answer `unavailable`.
    await wait_assigned(workers, "a and b sharing the partitions")
    api = Api(workers[0].url)
    names = [f"kr{i}" for i in range(RECEIVERS)]
    retry = {"schedule": [0.2, 0.5], "jitter": 0}
    rids = [(await api.create_receiver(recv.url(name), id=name, ordering="key", max_in_flight=8,
                                       retry=retry))["id"] for name in names]
    await api.close()

    load = KeyedLoad(workers, rids, seed=17)
    stop = asyncio.Event()
    sender = asyncio.create_task(load.run(stop))
    try:
        for kill in range(KILLS):
            await asyncio.sleep(rng.uniform(1.0, 3.0))
            assert [w.process.poll() for w in workers] == [None, None], "a worker died on its own"
            victim = rng.choice(workers)
            victim.kill9()
            print(f"\nkill -9 #{kill + 1}: worker {victim.data_dir.name} at {time.time():.1f}", flush=True)
            await asyncio.sleep(rng.uniform(0.5, 2.0))
            victim.start()
            await victim.wait_ready(120)
        await asyncio.sleep(2)
    finally:
        stop.set()
        await sender

    def answered() -> set[str]:
        ok = set(recv.ok_order)
        return {d.msg_id for d in recv.completed if (d.path, d.seq) in ok}

    try:
        await wait_until(lambda: set(load.accepted) <= answered(), 180, "every accepted message answered 2xx")
    except AssertionError:
        await report_missing(workers[0], load, answered())
        raise
    per_receiver = {name: sum(1 for rid in load.accepted.values() if rid == name) for name in names}
    gaps = {name: recv.missing_seqs(name, count) for name, count in per_receiver.items()}
    print(f"\nkill -9 x{KILLS} (key-ordered): accepted={len(load.accepted)} refused_batches={load.refused} "
          f"order_violations={len(recv.violations)} keys_out_of_order={len(recv.keys_out_of_order())} "
          f"requests={len(recv.deliveries)}", flush=True)
    await recv.stop()
    assert recv.violations == []
    assert recv.keys_out_of_order() == []
    assert {name: seqs for name, seqs in gaps.items() if seqs} == {}, "every seq 1..n got its 2xx"
    assert [w.process.poll() for w in workers] == [None, None], "a worker died on its own"
