"""Per-receiver order and isolation on one worker."""

from __future__ import annotations

import asyncio
import random
import time

import pytest

from tests.harness import Api, Delivery, Receiver, first_copies, wait_until

pytestmark = pytest.mark.integration


async def test_fifty_receivers_see_every_seq_in_order_despite_failures(make_worker) -> None:
    """50 receivers x 200 messages; 20 receivers fail at random for a while."""
    rng = random.Random(7)
    flaky = {f"r{i}" for i in rng.sample(range(50), 20)}
    window: dict[str, float] = {}  # failures for 3 s from the first request
    delivered: set[str] = set()

    async def behaviour(path: str, delivery: Delivery) -> int:
        until = window.setdefault("until", time.time() + 3.0)
        if path in flaky and time.time() < until and rng.random() < 0.5:
            return rng.choice([500, 502, 503, 429, 408])
        if delivery.seq:  # a message, not the webhook.ping probe of an open circuit
            delivered.add(delivery.msg_id)
        return 200

    recv = await Receiver(behaviour).start()
    worker = make_worker().start()
    await worker.wait_ready()
    api = Api(worker.url)
    try:
        ids = {}
        for i in range(50):
            ids[f"r{i}"] = (await api.create_receiver(recv.url(f"r{i}")))["id"]
        for n in range(0, 200, 20):  # interleave receivers, 1,000 messages per batch
            batch = [
                {"receiver_id": ids[f"r{i}"], "event_type": "t.x", "payload": {"n": k}}
                for k in range(n, n + 20)
                for i in range(50)
            ]
            await api.send_batch(batch)
        await wait_until(lambda: len(delivered) == 10_000, 180, "10,000 messages answered 2xx")
        retried = 0
        for name in ids:
            mine = [d for d in recv.by_path(name) if d.seq]  # probes carry no seq
            retried += len(mine) - len(first_copies(mine))
            assert [d.seq for d in first_copies(mine)] == list(range(1, 201)), name
            seq_of: dict[int, str] = {}
            for d in mine:  # a seq is never reused for another id
                assert seq_of.setdefault(d.seq, d.msg_id) == d.msg_id
        assert retried > 0, "the flaky receivers should have forced retries"
        print(f"\n10,000 messages to 50 receivers: {retried} retried requests, 0 out of order")
    finally:
        await api.close()
        await recv.stop()


async def test_slow_receiver_does_not_hold_up_its_partition(make_worker) -> None:
    """One partition: a receiver that sleeps 10 s must not delay 20 fast receivers."""
    release = asyncio.Event()

    async def behaviour(path: str, delivery: Delivery) -> int:
        if path == "slow":
            await asyncio.wait_for(release.wait(), timeout=10)
        return 200

    recv = await Receiver(behaviour).start()
    worker = make_worker(DISPATCHER_PARTITIONS="1").start()
    await worker.wait_ready()
    # The web server answers before partitions are assigned: not ready until then.
    assert 503 in worker.ready_statuses and worker.ready_statuses[-1] == 200
    api = Api(worker.url)
    try:
        slow = (await api.create_receiver(recv.url("slow")))["id"]
        fast = [(await api.create_receiver(recv.url(f"f{i}")))["id"] for i in range(20)]
        await api.send_batch([{"receiver_id": slow, "event_type": "t.x", "payload": k} for k in range(5)])
        await wait_until(lambda: len(recv.by_path("slow")) == 1, 30, "slow receiver's first request")
        await api.send_batch(
            [{"receiver_id": rid, "event_type": "t.x", "payload": k} for k in range(10) for rid in fast]
        )
        fast_paths = {f"f{i}" for i in range(20)}
        await wait_until(
            lambda: sum(d.path in fast_paths for d in recv.completed) == 200, 9, "fast deliveries"
        )
        # All 200 fast deliveries done while the slow receiver still holds its first request.
        assert [d.path for d in recv.completed].count("slow") == 0
        assert len(recv.by_path("slow")) == 1
        release.set()
        await wait_until(lambda: len(recv.by_path("slow")) == 5, 30, "slow receiver catches up")
        assert [d.seq for d in recv.by_path("slow")] == [1, 2, 3, 4, 5]
    finally:
        release.set()
        await api.close()
        await recv.stop()
