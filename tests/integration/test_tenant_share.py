"""A tenant's share of the lanes: one tenant's silent receivers cannot hold every slot another needs.

One worker with 8 fast-lane slots and the default share (half a lane per tenant), a long delivery
timeout (so a silent receiver holds its slots, as on a real deployment until its timeouts move it to
the slow lane), and two loopback receivers: one that answers nothing until the test lets it, one
that answers at once. The tenant whose receivers hang holds exactly its share; the other tenant and
untenanted receivers keep delivering; once the hang ends, every message of the hung tenant arrives.
A deployment of one tenant keeps whole lanes.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from tests.harness import Api, Delivery, Receiver, WorkerProcess, first_copies, wait_until
from tests.integration.test_tenant_tokens import mint

FAST_SLOTS = 8
SHARE = FAST_SLOTS // 2  # the default DISPATCHER_TENANT_SHARE of 0.5
WANTED = 3 * FAST_SLOTS  # attempts the hung tenant's receivers would start at once


@pytest.fixture(scope="module")
async def worker(make_module_worker: Callable[..., WorkerProcess]) -> AsyncIterator[WorkerProcess]:
    proc = make_module_worker(
        DISPATCHER_ALLOW_TARGETS="127.0.0.0/8",
        DISPATCHER_MAX_IN_FLIGHT=str(FAST_SLOTS),
        DISPATCHER_TIMEOUT="300",  # no timeout frees a slot while the test runs
        DISPATCHER_SLOW_AFTER_MS="0",  # no lane moves: the share alone keeps the lane open
    )
    await proc.wait_ready()
    yield proc


async def wait_until_read(worker: WorkerProcess, receivers: int) -> None:
    """Until the worker's subscription index holds `receivers` (each worker reads it from a topic)."""
    deadline = time.monotonic() + 30
    while (await worker.readyz())["subscriptions"]["receivers"] < receivers:
        assert time.monotonic() < deadline, "the receivers never reached the subscription index"
        await asyncio.sleep(0.05)


def message(receiver_id: str, n: int) -> dict[str, Any]:
    return {"receiver_id": receiver_id, "event_type": "share.test", "payload": {"n": n}}


def answering_once(gate: asyncio.Event) -> Callable[[str, Delivery], Awaitable[int]]:
    """A receiver silent until `gate` is set (at most 300 s), then 200."""
    async def behaviour(path: str, delivery: Delivery) -> int:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(gate.wait(), 300)
        return 200

    return behaviour


async def one_tenant_alone_keeps_the_whole_lane(
    acme: Api, worker: WorkerProcess, spread: dict[str, Any]
) -> None:
    """While the worker knows receivers of acme only, acme's receivers may take every slot."""
    gate = asyncio.Event()
    solo = await Receiver(answering_once(gate), host="127.0.0.3").start()
    try:
        rid = (await acme.create_receiver(solo.url("solo"), **spread))["id"]
        await wait_until_read(worker, 1)
        await acme.send_batch([message(rid, n) for n in range(FAST_SLOTS)])
        await wait_until(lambda: solo.max_concurrent == FAST_SLOTS, 60, "the whole lane taken by acme")
        assert not (await worker.readyz())["delivery"]["tenant_limits_apply"]
        gate.set()
        await acme.eventually_state(rid, lambda s: s["delivered"] == FAST_SLOTS, 30, "the solo one drained")
    finally:
        gate.set()
        await solo.stop()


async def test_a_tenants_silent_receivers_hold_only_its_share_of_the_fast_lane(
    api: Api, worker: WorkerProcess
) -> None:
    release = asyncio.Event()
    hung = await Receiver(answering_once(release), host="127.0.0.2", cancel_on_disconnect=True).start()
    fine = await Receiver().start()
    tenants: list[Api] = []
    try:
        acme_token, _ = await mint(api, "acme")
        globex_token, _ = await mint(api, "globex")
        acme, globex = Api(worker.url, acme_token), Api(worker.url, globex_token)
        tenants += [acme, globex]
        spread = {"ordering": "none", "max_in_flight": FAST_SLOTS, "concurrency": "fixed"}
        await one_tenant_alone_keeps_the_whole_lane(acme, worker, spread)

        # The share binds while receivers of more than one tenant exist (the untenanted count as one).
        other = (await globex.create_receiver(fine.url("g")))["id"]
        untenanted = (await api.create_receiver(fine.url("u")))["id"]
        silent_ids = [(await acme.create_receiver(hung.url(f"s{i}"), **spread))["id"] for i in range(3)]
        await wait_until_read(worker, 6)
        await acme.send_batch([message(rid, n) for rid in silent_ids for n in range(FAST_SLOTS)])
        # `max_concurrent` is sampled a moment after each request starts (tests/harness.py)
        await wait_until(lambda: hung.max_concurrent >= SHARE, 60, "the silent receivers to fill their share")

        await globex.send_batch([message(other, n) for n in range(10)])
        await api.send_batch([message(untenanted, n) for n in range(10)])
        await wait_until(lambda: len(fine.completed) == 20, 60, "the other receivers' deliveries")
        assert [d.seq for d in first_copies(fine.by_path("g"))] == list(range(1, 11))
        assert [d.seq for d in first_copies(fine.by_path("u"))] == list(range(1, 11))
        assert not release.is_set() and hung.concurrent == SHARE, "delivered while the share stayed held"
        assert hung.max_concurrent == SHARE, "the tenant's share is reached and never passed"
        delivery = (await worker.readyz())["delivery"]
        assert delivery["tenant_limits"]["fast"] == SHARE and delivery["tenant_limits_apply"], delivery
        assert delivery["tenants_posting"] == 1, delivery

        release.set()
        await wait_until(lambda: len(hung.completed) >= WANTED, 90, "every message of the silent receivers")
        for i, rid in enumerate(silent_ids):
            state = await acme.eventually_state(rid, lambda s: s["backlog"] == 0, 30, f"{rid} drained")
            assert state["delivered"] == FAST_SLOTS, state
            seqs = sorted(d.seq for d in first_copies(hung.by_path(f"s{i}")))
            assert seqs == list(range(1, FAST_SLOTS + 1)), rid
        assert hung.max_concurrent == SHARE
    finally:
        release.set()
        for client in tenants:
            await client.close()
        await hung.stop()
        await fine.stop()
