"""Catch-up reads: a receiver that lost data pulls its messages after a seq, while they are kept."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest

from tests.harness import Api, Delivery, Receiver, WorkerProcess

RETAIN_S = 3.0


@pytest.fixture(scope="module")
async def worker(make_module_worker: Callable[..., WorkerProcess]) -> AsyncIterator[WorkerProcess]:
    proc = make_module_worker(DISPATCHER_RETAIN_SECONDS=str(RETAIN_S))
    await proc.wait_ready()
    yield proc


def message(receiver_id: str, event_type: str, n: int) -> dict[str, object]:
    return {"receiver_id": receiver_id, "event_type": event_type, "payload": {"n": n}}


async def test_events_after_a_seq_with_their_status_until_the_retention_ends(api: Api) -> None:
    async def refuse_second(path: str, delivery: Delivery) -> int:
        return 400 if delivery.seq == 2 else 200

    server = await Receiver(refuse_second).start()
    try:
        rid = (await api.create_receiver(server.url("catch"), id="catcher"))["id"]
        ids = await api.send_batch([message(rid, "c.x", n) for n in range(3)])
        await api.eventually_state(rid, lambda s: s["delivered_seq"] == 3, 30, "3 settled")
        assert (await api.call("POST", f"/v1/receivers/{rid}/pause"))[0] == 200
        ids += await api.send_batch([message(rid, "c.y", n) for n in (3, 4)])
        await api.eventually_state(rid, lambda s: s["backlog"] == 2, 30, "2 buffered")

        status, body = await api.call("GET", f"/v1/receivers/{rid}/events?after_seq=0")
        assert status == 200, body
        events = body["events"]
        assert [(e["seq"], e["id"], e["status"]) for e in events] == [
            (1, ids[0], "delivered"), (2, ids[1], "dead_lettered"), (3, ids[2], "delivered"),
            (4, ids[3], "pending"), (5, ids[4], "pending"),
        ]
        assert [e["data"]["n"] for e in events] == [0, 1, 2, 3, 4]
        assert body["next_after_seq"] is None and body["retained_seconds"] == RETAIN_S

        status, page = await api.call("GET", f"/v1/receivers/{rid}/events?after_seq=2&limit=2")
        assert [e["seq"] for e in page["events"]] == [3, 4] and page["next_after_seq"] == 4

        left: list[tuple[int, str]] = []
        for _ in range(300):  # the retention sweep runs on the receiver's timer: up to 30 s
            status, body = await api.call("GET", f"/v1/receivers/{rid}/events")
            left = [(e["seq"], e["status"]) for e in body["events"]]
            if len(left) == 2:
                break
            await asyncio.sleep(0.1)
        assert left == [(4, "pending"), (5, "pending")], "settled ones dropped after the retention"
    finally:
        await server.stop()
