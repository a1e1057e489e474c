"""A receiver that is away while messages queue for it: the backlog lives in RocksDB,
so the worker's memory does not grow with it, and it drains in order.

Runs only when `DISPATCHER_TEST_BACKLOG` gives the size (100000 for the figure in
the README: about 7 minutes, too long for every run; the batching test covers a
10,000 backlog). The worker produces 1 MiB batches: with the default 16 KiB the
embedded broker, busy with one receiver's changelog, takes in only tens of
messages per second.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from tests.harness import Api, Delivery, Receiver, WorkerProcess

BACKLOG = int(os.environ.get("DISPATCHER_TEST_BACKLOG", "0"))
RSS_GROWTH_LIMIT_MB = 50


@pytest.mark.skipif(not BACKLOG, reason="set DISPATCHER_TEST_BACKLOG (see the module docstring)")
@pytest.mark.timeout(3600)
async def test_a_big_backlog_stays_out_of_memory_and_drains_in_order(
    make_worker: Callable[..., WorkerProcess],
) -> None:
    accepted: list[int] = []  # seqs of the events in every batch, in arrival order

    async def behaviour(path: str, delivery: Delivery) -> int:
        if delivery.headers.get("webhook-event-type") == "webhook.batch":
            accepted.extend(e["seq"] for e in orjson.loads(delivery.body)["events"])
        return 200

    server = await Receiver(behaviour).start()
    worker = make_worker("w", DISPATCHER_PRODUCER_MAX_BATCH_BYTES=str(1 << 20))
    worker.start()
    await worker.wait_ready()
    api = Api(worker.url)
    try:
        # batch_max lets the drain finish in CI time: 1,000 POSTs of 100 events.
        rid = (await api.create_receiver(server.url("away"), batch_max=100))["id"]
        assert (await api.call("POST", f"/v1/receivers/{rid}/pause"))[0] == 200
        warm = await _fill(api, rid, 0, 2000)
        await api.eventually_state(rid, lambda s: s["backlog"] == 2000, 60, "the warm-up backlog")
        before = worker.rss_mb()
        started = time.monotonic()
        await _fill(api, rid, warm, BACKLOG)
        state = await api.eventually_state(rid, lambda s: s["backlog"] == 2000 + BACKLOG, 1800, "the backlog")
        buffered_s = time.monotonic() - started
        await asyncio.sleep(2)  # let the changelog producer and RocksDB settle
        grown = worker.rss_mb() - before
        print(
            f"\nbacklog {state['backlog']} messages, {state['backlog_bytes'] / 2**20:.1f} MiB stored; "
            f"RSS {before:.1f} MB with 2,000 buffered, +{grown:.1f} MB with {BACKLOG:,} more "
            f"(buffered in {buffered_s:.1f} s)"
        )
        assert grown < RSS_GROWTH_LIMIT_MB

        assert (await api.call("POST", f"/v1/receivers/{rid}/resume"))[0] == 200
        total = 2000 + BACKLOG
        drain_started = time.monotonic()
        await api.eventually_state(rid, lambda s: s["delivered_seq"] == total, 1800, "the drain")
        print(f"drained {total:,} in {time.monotonic() - drain_started:.1f} s")
        assert accepted == list(range(1, total + 1)), "all delivered, in order, once"
    finally:
        await api.close()
        await server.stop()


async def _fill(api: Api, receiver_id: str, start: int, count: int) -> int:
    """Send `count` messages of ~200 bytes, 1,000 per request; return the next number."""
    for first in range(start, start + count, 1000):
        batch: list[dict[str, Any]] = [
            {"receiver_id": receiver_id, "event_type": "bulk.item", "payload": {"n": n, "pad": "x" * 160}}
            for n in range(first, min(first + 1000, start + count))
        ]
        await api.send_batch(batch)
    return start + count
