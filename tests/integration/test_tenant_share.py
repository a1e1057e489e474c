"""A tenant's share of the lanes: one tenant's silent receivers cannot hold every slot another needs.

One worker with 8 fast-lane slots and the default share (half a lane per tenant), a long delivery
timeout (so a silent receiver holds its slots, as on a real deployment until its timeouts move it to
the slow lane), and two loopback receivers: one that answers nothing until the test lets it, one
that answers at once. The tenant whose receivers hang holds exactly its share; the other tenant and
untenanted receivers keep delivering; once the hang ends, every message of the hung tenant arrives.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
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


def message(receiver_id: str, n: int) -> dict[str, Any]:
    return {"receiver_id": receiver_id, "event_type": "share.test", "payload": {"n": n}}


async def test_a_tenants_silent_receivers_hold_only_its_share_of_the_fast_lane(
    api: Api, worker: WorkerProcess
) -> None:
    release = asyncio.Event()

    async def silent(path: str, delivery: Delivery) -> int:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(release.wait(), 300)
        return 200

    hung = await Receiver(silent, host="127.0.0.2", cancel_on_disconnect=True).start()
    fine = await Receiver().start()
    tenants: list[Api] = []
    try:
        acme_token, _ = await mint(api, "acme")
        globex_token, _ = await mint(api, "globex")
        acme, globex = Api(worker.url, acme_token), Api(worker.url, globex_token)
        tenants += [acme, globex]
        spread = {"ordering": "none", "max_in_flight": FAST_SLOTS, "concurrency": "fixed"}
        silent_ids = [(await acme.create_receiver(hung.url(f"s{i}"), **spread))["id"] for i in range(3)]
        await acme.send_batch([message(rid, n) for rid in silent_ids for n in range(FAST_SLOTS)])
        await wait_until(lambda: hung.concurrent >= SHARE, 60, "the silent receivers to fill their share")

        other = (await globex.create_receiver(fine.url("g")))["id"]
        untenanted = (await api.create_receiver(fine.url("u")))["id"]
        await globex.send_batch([message(other, n) for n in range(10)])
        await api.send_batch([message(untenanted, n) for n in range(10)])
        await wait_until(lambda: len(fine.completed) == 20, 60, "the other receivers' deliveries")
        assert [d.seq for d in first_copies(fine.by_path("g"))] == list(range(1, 11))
        assert [d.seq for d in first_copies(fine.by_path("u"))] == list(range(1, 11))
        assert not release.is_set() and hung.concurrent == SHARE, "delivered while the share stayed held"
        assert hung.max_concurrent == SHARE, "the tenant's share is reached and never passed"
        delivery = (await worker.readyz())["delivery"]
        assert delivery["tenant_limits"]["fast"] == SHARE and delivery["tenants_posting"] == 1, delivery

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
