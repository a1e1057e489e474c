"""The deliverer's side of transforms: what is posted, what is not, and where a heavy template runs."""

from __future__ import annotations

import asyncio
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import orjson
import pytest

from dispatcher.deliverer import Deliverer, lane_limits
from dispatcher.domain.records import Outcome, ReceiverConfig
from dispatcher.domain.slots import SlotPool
from dispatcher.domain.transform import INLINE_STEPS
from dispatcher.transport import Gate, Response

ITEMS = list(range(INLINE_STEPS))  # a $map over them takes more steps than a run on the loop may


class Recorded:
    """A transport that answers 200 and keeps what it was sent."""

    def __init__(self) -> None:
        self.posts: list[tuple[str, dict[str, str], bytes]] = []

    async def post(
        self, url: str, headers: dict[str, str], body: bytes, gate: Gate | None = None
    ) -> Response:
        self.posts.append((url, headers, body))
        return Response(200)

    async def request(self, method: str, url: str, headers: dict[str, str], body: bytes = b"",
                      gate: Gate | None = None) -> Response:
        return Response(200)

    async def close(self) -> None:
        return None


class CountingPool(ThreadPoolExecutor):
    def __init__(self) -> None:
        super().__init__(1)
        self.submitted = 0

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        self.submitted += 1
        return super().submit(fn, *args, **kwargs)


async def deliver(template: dict[str, Any], payload: Any) -> tuple[Outcome, Recorded, CountingPool]:
    """One attempt of one message through a receiver with `template`: its outcome, posts and pool."""
    reported: list[Outcome] = []

    async def send_outcome(receiver_id: str, partition: int, outcome: Outcome) -> None:
        reported.append(outcome)

    def entries(receiver_id: str, seq: int, count: int, max_bytes: int) -> list[dict[str, Any]]:
        return [{"id": "m1", "seq": seq, "type": "a.b", "data": payload, "headers": {}, "accepted_at": 1.0}]

    transport, pool = Recorded(), CountingPool()
    config = ReceiverConfig("r1", "http://127.0.0.1:1/hook", "whsec_" + "A" * 32, transform=template)
    deliverer = Deliverer(transport, send_outcome, SlotPool(lane_limits(4, 1), 4, {}), entries,
                          lambda rid, p: None, transform_pool=pool)
    deliverer.start("r1", 0, config, seq=1, attempt=1)
    for _ in range(500):  # bounded: the attempt runs on the next turns of the loop (or in the pool)
        if reported:
            break
        await asyncio.sleep(0.01)
    await deliverer.close()
    [outcome] = reported
    return outcome, transport, pool


@pytest.mark.parametrize(("template", "payload", "posted", "threaded"), [
    ({"body": {"n": "${payload}"}}, 7, b'{"n":"7"}', 0),
    ({"body": {"$map": {"$eval": "payload"}, "each(x)": {"$eval": "x + 1"}}}, ITEMS,
     orjson.dumps([x + 1 for x in ITEMS]), 1),
])
async def test_a_template_too_heavy_for_the_loop_runs_in_the_pool(
    template: dict[str, Any], payload: Any, posted: bytes, threaded: int
) -> None:
    outcome, transport, pool = await deliver(template, payload)
    assert (outcome.ok, outcome.transform) == (True, "")
    [(url, headers, body)] = transport.posts
    assert (url, body, headers["webhook-id"]) == ("http://127.0.0.1:1/hook", posted, "m1")
    assert pool.submitted == threaded


@pytest.mark.parametrize(("template", "transform", "says", "threaded"), [
    ({"cancel": True}, "cancelled", "cancelled by the receiver's transform", 0),
    ({"body": {"$eval": "payload.nope"}}, "error", "transform: InterpreterError", 0),
    ({"path": "//evil.example"}, "error", "transform.path: must not hold an empty segment", 0),
    ({"body": {"$map": {"$eval": "range(0, 1000)"}, "each(x)": {
        "$map": {"$eval": "range(0, 1000)"}, "each(y)": 1}}}, "error", "budget of steps", 1),
])
async def test_a_cancel_or_a_failure_posts_nothing(
    template: dict[str, Any], transform: str, says: str, threaded: int
) -> None:
    outcome, transport, pool = await deliver(template, {"a": 1})
    assert transport.posts == []
    assert (outcome.transform, outcome.ok, outcome.status, outcome.attempt) == (transform, False, None, 1)
    assert outcome.error is not None and says in outcome.error
    assert pool.submitted == threaded
