"""Isolation: slow and hanging receivers go to the slow lane, in-flight bounds hold, backlogs are capped.

One worker with small budgets (16 fast-lane slots, 4 slow-lane slots, host
127.0.0.3 capped at 3) and loopback receivers on distinct 127/8 addresses, so
per-host limits apply. Assertions are on counts, order and lane states.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
import pytest

from tests.harness import Api, Delivery, Receiver, WorkerProcess, first_copies, wait_until

FAST_SLOTS, SLOW_SLOTS, CAPPED_HOST_SLOTS = 16, 4, 3
SLOW_ANSWER_S = 5.0
TIMEOUT_S = 6.5


@pytest.fixture(scope="module")
async def worker(make_module_worker: Callable[..., WorkerProcess]) -> AsyncIterator[WorkerProcess]:
    proc = make_module_worker(
        DISPATCHER_ALLOW_TARGETS="127.0.0.0/8",
        DISPATCHER_MAX_IN_FLIGHT=str(FAST_SLOTS),
        DISPATCHER_SLOW_LANE_IN_FLIGHT=str(SLOW_SLOTS),
        DISPATCHER_HOST_LIMITS=f"127.0.0.3={CAPPED_HOST_SLOTS}",
        DISPATCHER_SLOW_AFTER_MS="3000",  # fast receivers stay fast even on a loaded machine
        DISPATCHER_SLOW_MIN_SAMPLES="2",
        DISPATCHER_SLOW_TIMEOUTS="2",
        DISPATCHER_PAROLE_AFTER="3",
        DISPATCHER_TIMEOUT=str(TIMEOUT_S),
    )
    await proc.wait_ready()
    yield proc


def message(receiver_id: str, n: int) -> dict[str, Any]:
    return {"receiver_id": receiver_id, "event_type": "iso.test", "payload": {"n": n}}


async def create_many(api: Api, urls: list[str], **extra: Any) -> list[str]:
    ids: list[str] = []
    for start in range(0, len(urls), 20):
        made = await asyncio.gather(*(api.create_receiver(url, **extra) for url in urls[start : start + 20]))
        ids += [m["id"] for m in made]
    return ids


def seqs(deliveries: list[Delivery]) -> list[int]:
    return [d.seq for d in first_copies(deliveries)]


def lane_is(lane: str) -> Callable[[dict[str, Any]], bool]:
    return lambda state: state["lane"]["lane"] == lane


async def test_bad_receivers_go_to_the_slow_lane_and_fast_ones_keep_flowing(api: Api) -> None:
    release = asyncio.Event()
    cured = asyncio.Event()

    async def bad(path: str, delivery: Delivery) -> int:
        if path.startswith("slow") and not cured.is_set():
            await asyncio.sleep(SLOW_ANSWER_S)
        elif path.startswith("hang"):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(release.wait(), 300)
        return 200

    fast_server = await Receiver().start()
    bad_server = await Receiver(bad, host="127.0.0.2", cancel_on_disconnect=True).start()
    try:
        fast = await create_many(api, [fast_server.url(f"f{i}") for i in range(200)])
        slow = await create_many(api, [bad_server.url(f"slow{i}") for i in range(5)])
        hang = await create_many(api, [bad_server.url(f"hang{i}") for i in range(5)])
        await api.send_batch([message(rid, n) for rid in slow + hang for n in range(3)])
        await api.send_batch([message(rid, 0) for rid in fast])

        for rid in slow + hang:
            await api.eventually_state(rid, lane_is("slow"), 60, f"{rid} in the slow lane")
        # From here every attempt of a bad receiver starts in the slow lane.
        bad_server.count_afresh()

        for n in range(1, 6):
            await api.send_batch([message(rid, n) for rid in fast])
        await wait_until(lambda: len(fast_server.completed) >= 6 * 200, 60, "every fast delivery")

        for rid in slow + hang:
            state = await api.state(rid)
            assert state["lane"]["lane"] == "slow", state
            assert state["backlog"] > 0 or rid in slow, "the hanging ones still hold their messages"
        assert bad_server.max_concurrent <= SLOW_SLOTS, "slow-lane attempts stay within their budget"
        for i, rid in enumerate(fast):
            assert seqs(fast_server.by_path(f"f{i}")) == [1, 2, 3, 4, 5, 6], rid
            assert (await api.state(rid))["lane"]["lane"] == "fast"

        # The slow receivers recover: fast answers parole them, and nothing was lost or reordered.
        cured.set()
        await api.send_batch([message(rid, n) for rid in slow for n in range(3, 7)])
        for rid in slow:
            await api.eventually_state(
                rid, lambda s: lane_is("fast")(s) and s["backlog"] == 0, 90, f"{rid} paroled and drained"
            )
        for i in range(5):
            assert seqs(bad_server.by_path(f"slow{i}")) == list(range(1, 8))
    finally:
        release.set()
        await fast_server.stop()
        await bad_server.stop()


async def test_in_flight_bounds_hold_per_host_and_per_worker(api: Api) -> None:
    async def busy(path: str, delivery: Delivery) -> int:
        await asyncio.sleep(0.2)
        return 200

    capped = await Receiver(busy, host="127.0.0.3").start()
    wide = await Receiver(busy, host="127.0.0.4").start()
    try:
        on_capped = await create_many(api, [capped.url(f"c{i}") for i in range(12)])
        on_wide = await create_many(api, [wide.url(f"w{i}") for i in range(40)])
        await api.send_batch([message(rid, n) for n in range(4) for rid in on_capped + on_wide])
        await wait_until(
            lambda: len(capped.completed) == 48 and len(wide.completed) == 160, 60, "every delivery"
        )
        assert capped.max_concurrent == CAPPED_HOST_SLOTS, "the host's bound is reached and never passed"
        assert CAPPED_HOST_SLOTS < wide.max_concurrent <= FAST_SLOTS, "the worker's bound holds"
        for i in range(12):
            assert seqs(capped.by_path(f"c{i}")) == [1, 2, 3, 4]
        for i in range(40):
            assert seqs(wide.by_path(f"w{i}")) == [1, 2, 3, 4]
    finally:
        await capped.stop()
        await wide.stop()


async def test_an_unordered_receiver_gets_max_in_flight_at_once_and_retries_each_alone(api: Api) -> None:
    failed_once: set[str] = set()
    succeeded: list[int] = []

    async def slowish(path: str, delivery: Delivery) -> int:
        await asyncio.sleep(0.3)
        if delivery.seq % 10 == 3 and delivery.msg_id not in failed_once:
            failed_once.add(delivery.msg_id)
            return 503  # every tenth message fails once; the others do not wait for it
        succeeded.append(delivery.seq)
        return 200

    server = await Receiver(slowish, host="127.0.0.5").start()
    try:
        # Fixed: an adaptive window would halve at the 503s (tests/integration/test_receiver_steering.py).
        made = await api.create_receiver(server.url("u"), ordering="none", max_in_flight=8,
                                         concurrency="fixed")
        assert (made["ordering"], made["max_in_flight"]) == ("none", 8)
        rid = made["id"]
        await api.send_batch([message(rid, n) for n in range(60)])
        await api.eventually_state(rid, lambda s: s["delivered_seq"] == 60, 60, "all 60 settled")
        assert server.max_concurrent == 8, "the window is used and never passed"
        assert sorted(succeeded) == list(range(1, 61)), "each seq got one 2xx"
        assert succeeded.index(4) < succeeded.index(3), "seq 3's retry did not hold seq 4 back"
        firsts = {d.msg_id: d.seq for d in first_copies(server.deliveries)}
        assert sorted(firsts.values()) == list(range(1, 61))
        assert all(firsts[d.msg_id] == d.seq for d in server.deliveries), "a retry keeps its seq"
        assert len(server.deliveries) == 66, "60 messages and 6 retries"
        state = await api.state(rid)
        assert (state["delivered"], state["backlog"], state["window"]) == (60, 0, [])
    finally:
        await server.stop()


async def test_a_batching_receiver_drains_10000_in_at_most_100_posts_in_order(api: Api) -> None:
    server = await Receiver().start()
    try:
        rid = (await api.create_receiver(server.url("batched"), batch_max=100))["id"]
        status, _ = await api.call("POST", f"/v1/receivers/{rid}/pause")
        assert status == 200
        for start in range(0, 10_000, 1000):
            await api.send_batch([message(rid, n) for n in range(start, start + 1000)])
        await api.eventually_state(rid, lambda s: s["backlog"] == 10_000, 240, "10,000 buffered")
        status, _ = await api.call("POST", f"/v1/receivers/{rid}/resume")
        assert status == 200
        await api.eventually_state(rid, lambda s: s["delivered_seq"] == 10_000, 240, "the backlog drained")
        posts = first_copies(server.completed)
        assert len(posts) <= 100
        events = [e for post in posts for e in orjson.loads(post.body)["events"]]
        assert [e["seq"] for e in events] == list(range(1, 10_001))
        assert [e["data"]["n"] for e in events] == list(range(10_000))
        for post in posts:
            seq_range = orjson.loads(post.body)["events"]
            assert post.headers["webhook-sequence"] == f"{seq_range[0]['seq']}-{seq_range[-1]['seq']}"
            assert post.headers["webhook-event-type"] == "webhook.batch"

        # An idle batching receiver gets a lone event at once, as a batch of one.
        await api.send_batch([message(rid, 10_000)])
        await wait_until(lambda: len(server.completed) == len(posts) + 1, 30, "the lone event")
        [lone] = orjson.loads(server.completed[-1].body)["events"]
        assert lone["seq"] == 10_001 and server.completed[-1].headers["webhook-sequence"] == "10001-10001"
    finally:
        await server.stop()


async def test_rate_limit_spaces_deliveries(api: Api) -> None:
    server = await Receiver().start()
    try:
        rid = (await api.create_receiver(server.url("paced"), rate_limit=10))["id"]
        await api.send_batch([message(rid, n) for n in range(25)])
        await wait_until(lambda: len(server.completed) >= 25, 30, "25 deliveries")
        assert seqs(server.completed) == list(range(1, 26))
        # A burst of 10, then 10 a second: 15 more need at least 1.5 s (a lower bound only).
        arrivals = [d.at for d in server.completed]
        assert arrivals[-1] - arrivals[0] >= 1.4
    finally:
        await server.stop()


async def test_a_full_backlog_dead_letters_the_oldest_or_refuses_new_messages(api: Api) -> None:
    server = await Receiver().start()
    try:
        oldest = (await api.create_receiver(server.url("oldest"), backlog_max=3))["id"]
        made = await api.create_receiver(server.url("refusing"), backlog_max=3, backlog_overflow="reject")
        refusing = made["id"]
        for rid in (oldest, refusing):
            assert (await api.call("POST", f"/v1/receivers/{rid}/pause"))[0] == 200

        ids = await api.send_batch([message(oldest, n) for n in range(5)])
        state = await api.eventually_state(oldest, lambda s: s["dead_lettered"] == 2, 30, "2 dead letters")
        assert state["backlog"] == 3
        status, body = await api.call("GET", f"/v1/receivers/{oldest}/dead-letters")
        letters = [(x["seq"], x["reason"]) for x in body["dead_letters"]]
        assert letters == [(1, "backlog_full"), (2, "backlog_full")]
        statuses = [(await api.call("GET", f"/v1/receivers/{oldest}/messages/{ids[n]}"))[1] for n in (0, 2)]
        assert [(x["status"], x["seq"], x.get("reason")) for x in statuses] == [
            ("dead_lettered", 1, "backlog_full"), ("pending", 3, None)
        ]

        await api.send_batch([message(refusing, n) for n in range(3)])
        await api.eventually_state(refusing, lambda s: s["backlog"] == 3, 30, "3 buffered")
        status, body = await api.call("POST", "/v1/messages", message(refusing, 3))
        assert status == 429 and body["error"]["code"] == "backlog_full"
        assert body["error"]["field"] == "receiver_id"

        for rid in (oldest, refusing):
            assert (await api.call("POST", f"/v1/receivers/{rid}/resume"))[0] == 200
        await wait_until(lambda: len(server.completed) == 6, 30, "both backlogs drained")
        assert seqs(server.by_path("oldest")) == [3, 4, 5]
        assert [orjson.loads(d.body)["data"]["n"] for d in server.by_path("oldest")] == [2, 3, 4]
        assert seqs(server.by_path("refusing")) == [1, 2, 3]
        status, body = await api.call("GET", f"/v1/receivers/{oldest}/messages/{ids[2]}")
        assert (status, body["status"], body["seq"]) == (200, "delivered", 3)
    finally:
        await server.stop()
