"""What a receiver can do to its own delivery: adaptive concurrency, webhook-delivery-control, heartbeats.

One worker on the embedded broker, loopback receivers answering what each
test needs. Assertions are on counts, the receiver's state and the attempt
log; times only as lower bounds of a wait the receiver asked for.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
import pytest

from dispatcher.domain.signing import verify_with
from tests.harness import Api, Delivery, Receiver, WorkerProcess, first_copies, wait_until

MAX_PAUSE_S = 3


@pytest.fixture(scope="module")
async def worker(make_module_worker: Callable[..., WorkerProcess]) -> AsyncIterator[WorkerProcess]:
    proc = make_module_worker(DISPATCHER_MAX_ASKED_PAUSE=str(MAX_PAUSE_S), DISPATCHER_PROBE_BASE="1")
    await proc.wait_ready()
    yield proc


def message(receiver_id: str, n: int) -> dict[str, Any]:
    return {"receiver_id": receiver_id, "event_type": "steer.test", "payload": {"n": n}}


def steering(header: str, on_first: bool = True) -> Callable[[str, Delivery], Any]:
    """Answer 200, with the control header on the first message only (or on every one)."""
    said = [False]

    async def behaviour(path: str, delivery: Delivery) -> tuple[int, dict[str, str]]:
        if said[0] and on_first:
            return 200, {}
        said[0] = True
        return 200, {"Webhook-Delivery-Control": header}

    return behaviour


async def controls(api: Api, rid: str) -> list[str]:
    return [a["control"] for a in await api.attempts(rid) if "control" in a]


async def test_a_receiver_that_takes_k_at_once_gets_a_window_near_k(api: Api) -> None:
    k = 4
    open_now = [0]
    answered: dict[int, int] = {}

    async def overloaded(path: str, delivery: Delivery) -> int:
        open_now[0] += 1
        try:
            status = 429 if open_now[0] > k else 200
            await asyncio.sleep(0.02)
            answered[status] = answered.get(status, 0) + 1
            return status
        finally:
            open_now[0] -= 1

    async with Receiver(overloaded) as server:
        made = await api.create_receiver(server.url("k"), ordering="none", max_in_flight=32)
        rid = made["id"]
        total = 300
        await api.send_batch([message(rid, n) for n in range(total)])
        state = await api.eventually_state(rid, lambda s: s["delivered"] == total, 120, "all delivered")
        assert sorted(d.seq for d in first_copies(server.completed) if d.seq) == list(range(1, total + 1))
        assert state["dead_lettered"] == 0
        window = state["concurrency"]
        assert window["mode"] == "adaptive" and window["ceiling"] == 32
        assert 1 <= window["window"] <= k + 1, window
        # Its last change: growth, a 429, or (on a busy machine) answers far slower than unloaded.
        assert window["cuts"] >= 1 and window["reason"] in ("grew", "429", "latency")
        # A fixed window of 32 would draw about 28 refusals for every 4 deliveries.
        assert answered.get(429, 0) <= total // 5, answered


async def test_a_fixed_window_keeps_max_in_flight_out(api: Api) -> None:
    release = asyncio.Event()

    async def held(path: str, delivery: Delivery) -> int:
        await release.wait()
        return 200

    server = await Receiver(held).start()
    try:
        rid = (await api.create_receiver(server.url("fixed"), ordering="none", max_in_flight=6,
                                         concurrency="fixed"))["id"]
        await api.send_batch([message(rid, n) for n in range(10)])
        await wait_until(lambda: server.concurrent == 6, 30, "six requests open at once")
        state = await api.state(rid)
        assert (state["concurrency"]["mode"], state["concurrency"]["window"]) == ("fixed", 6)
        release.set()
        await api.eventually_state(rid, lambda s: s["delivered"] == 10, 30, "all ten delivered")
    finally:
        release.set()
        await server.stop()


async def test_pause_holds_delivery_for_the_seconds_asked(api: Api) -> None:
    async with Receiver(steering("pause=2")) as server:
        rid = (await api.create_receiver(server.url("pause")))["id"]
        await api.send_batch([message(rid, n) for n in range(3)])
        state = await api.eventually_state(rid, lambda s: (s["delivered"], s["backlog"]) == (1, 2), 30,
                                           "the first delivered, two held")
        assert state["delivery_control"]["paused_until"] is not None
        await api.eventually_state(rid, lambda s: s["delivered"] == 3, 30, "the rest after the pause")
        first, second = server.completed[0].at, server.completed[1].at
        assert second - first >= 1.9, "the second went out only after the pause"
        assert await controls(api, rid) == ["webhook-delivery-control: pause 2s"]


async def test_a_pause_longer_than_allowed_is_clamped(api: Api) -> None:
    async with Receiver(steering("pause=86400")) as server:
        rid = (await api.create_receiver(server.url("long")))["id"]
        await api.send_batch([message(rid, n) for n in range(2)])
        await api.eventually_state(rid, lambda s: s["delivered"] == 2, 30, "both delivered after the clamp")
        assert await controls(api, rid) == [
            f"webhook-delivery-control: pause {MAX_PAUSE_S}s (asked 86400, at most {MAX_PAUSE_S})"
        ]


async def test_max_in_flight_lowers_the_window_up_to_the_ceiling(api: Api) -> None:
    async with Receiver(steering("max-in-flight=2", on_first=False)) as server:
        rid = (await api.create_receiver(server.url("cap"), ordering="none", max_in_flight=16,
                                         concurrency="fixed"))["id"]
        await api.send_batch([message(rid, 0)])
        await api.eventually_state(rid, lambda s: s["delivered"] == 1, 30, "the first delivered")
        server.max_concurrent = 0
        await api.send_batch([message(rid, n) for n in range(1, 40)])
        state = await api.eventually_state(rid, lambda s: s["delivered"] == 40, 60, "all delivered")
        assert server.max_concurrent <= 2
        assert (state["concurrency"]["window"], state["delivery_control"]["max_in_flight"]) == (2, 2)
    async with Receiver(steering("max-in-flight=100")) as server:
        rid = (await api.create_receiver(server.url("over"), ordering="none", max_in_flight=8))["id"]
        await api.send_batch([message(rid, 0)])
        await api.eventually_state(rid, lambda s: s["delivered"] == 1, 30, "delivered")
        said = "webhook-delivery-control: max-in-flight 8 (asked 100, ceiling 8)"
        assert await controls(api, rid) == [said]


async def test_rate_paces_delivery_and_never_exceeds_the_receivers_own_limit(api: Api) -> None:
    async with Receiver(steering("rate=4")) as server:
        rid = (await api.create_receiver(server.url("rate")))["id"]
        await api.send_batch([message(rid, n) for n in range(10)])
        state = await api.eventually_state(rid, lambda s: s["delivered"] == 10, 60, "ten delivered")
        arrivals = [d.at for d in server.completed]
        # After the first: a burst of 4, then 4 a second, so the other 5 need at least 1.25 s.
        assert arrivals[-1] - arrivals[1] >= 1.2
        assert state["delivery_control"]["rate"] == 4.0
    async with Receiver(steering("rate=500")) as server:
        rid = (await api.create_receiver(server.url("capped"), rate_limit=50))["id"]
        await api.send_batch([message(rid, 0)])
        await api.eventually_state(rid, lambda s: s["delivered"] == 1, 30, "delivered")
        assert await controls(api, rid) == ["webhook-delivery-control: rate 50/s (asked 500, rate_limit 50)"]


async def test_disable_on_a_2xx_holds_the_rest_until_enabled(api: Api) -> None:
    async with Receiver(steering("disable")) as server:
        rid = (await api.create_receiver(server.url("off")))["id"]
        await api.send_batch([message(rid, n) for n in range(3)])
        state = await api.eventually_state(rid, lambda s: s["disabled"] and s["backlog"] == 2, 30,
                                           "disabled by the receiver, two held")
        assert (state["delivered"], state["status"]) == (1, "disabled")
        assert "webhook-delivery-control: disable" in state["disabled_reason"]
        assert (await api.call("POST", f"/v1/receivers/{rid}/enable"))[0] == 200
        await api.eventually_state(rid, lambda s: s["delivered"] == 3, 30, "the rest once enabled")


async def test_ignore_and_bad_values_change_nothing_and_say_so(api: Api) -> None:
    async with Receiver(steering("pause=600, disable")) as server:
        rid = (await api.create_receiver(server.url("deaf"), delivery_control="ignore"))["id"]
        await api.send_batch([message(rid, n) for n in range(3)])
        state = await api.eventually_state(rid, lambda s: s["delivered"] == 3, 30, "all three")
        assert not state["disabled"] and state["delivery_control"]["paused_until"] is None
        assert await controls(api, rid) == ["webhook-delivery-control ignored (delivery_control: ignore)"]
    async with Receiver(steering("pause=-5, rate=fast, max-in-flight=1.5, hush=1")) as server:
        rid = (await api.create_receiver(server.url("garbled"), ordering="none", max_in_flight=4))["id"]
        await api.send_batch([message(rid, n) for n in range(3)])
        state = await api.eventually_state(rid, lambda s: s["delivered"] == 3, 30, "all three")
        asked = state["delivery_control"]
        assert (asked["paused_until"], asked["rate"], asked["max_in_flight"]) == (None, None, None)
        [note] = await controls(api, rid)
        for said in ("unknown directive 'hush' skipped", "pause: '-5' is not a number",
                     "rate: 'fast' is not a number", "max-in-flight: '1.5' is not a whole number"):
            assert said in note


async def test_heartbeats_carry_the_last_seq_when_idle_and_never_while_busy(api: Api) -> None:
    busy_at_heartbeat: list[int] = []
    open_messages = [0]
    hold = asyncio.Event()
    hold.set()

    async def behaviour(path: str, delivery: Delivery) -> int:
        if delivery.headers.get("webhook-event-type") == "webhook.heartbeat":
            busy_at_heartbeat.append(open_messages[0])
            return 200
        open_messages[0] += 1
        try:
            await hold.wait()
            return 200
        finally:
            open_messages[0] -= 1

    server = await Receiver(behaviour).start()
    try:
        made = await api.create_receiver(server.url("hb"), heartbeat_interval=1)
        rid, secret = made["id"], made["secret"]
        await api.send_batch([message(rid, n) for n in range(3)])

        def heartbeats() -> list[Delivery]:
            return [d for d in server.completed if d.headers.get("webhook-event-type") == "webhook.heartbeat"]

        await wait_until(lambda: len(heartbeats()) >= 1, 30, "a heartbeat once idle")
        beat = heartbeats()[0]
        body = orjson.loads(beat.body)
        assert (body["type"], body["data"]["last_seq"]) == ("webhook.heartbeat", 3)
        assert "webhook-sequence" not in beat.headers
        assert verify_with(secret, beat.msg_id, int(beat.headers["webhook-timestamp"]), beat.body,
                           beat.headers["webhook-signature"])

        hold.clear()  # a message that stays open for longer than the interval
        await api.send_batch([message(rid, 3)])
        await wait_until(lambda: open_messages[0] == 1, 30, "the fourth open")
        before = len(heartbeats())
        await asyncio.sleep(2.5)  # a bounded look at a negative: over two intervals with the message open
        assert len(heartbeats()) == before, "no heartbeat while a message is out"
        hold.set()
        await wait_until(lambda: len(heartbeats()) > before, 30, "heartbeats again once idle")
        assert orjson.loads(heartbeats()[-1].body)["data"]["last_seq"] == 4
        assert busy_at_heartbeat and not any(busy_at_heartbeat)
        state = await api.state(rid)
        assert state["heartbeat"]["sent"] >= 2 and state["circuit"] == "closed"
        assert state["delivered"] == 4 and state["failed_attempts"] == 0
        kinds = {a["kind"] for a in await api.attempts(rid)}
        assert "heartbeat" in kinds
    finally:
        hold.set()
        await server.stop()


async def test_no_heartbeat_while_the_circuit_is_open_and_failures_do_not_count(api: Api) -> None:
    failing = [True]

    async def behaviour(path: str, delivery: Delivery) -> int:
        if delivery.headers.get("webhook-event-type") == "webhook.heartbeat":
            return 500  # a failed heartbeat: logged, never counted
        return 500 if failing[0] else 200

    async with Receiver(behaviour) as server:
        made = await api.create_receiver(server.url("hbf"), heartbeat_interval=1)
        rid = made["id"]
        # Idle: heartbeats fail, and neither the breaker nor the failure count moves.
        await wait_until(lambda: len(server.completed) >= 2, 30, "two failed heartbeats")
        state = await api.state(rid)
        assert (state["circuit"], state["failed_attempts"], state["failing_since"]) == ("closed", 0, None)
        await api.send_batch([message(rid, n) for n in range(5)])
        await api.eventually_state(rid, lambda s: s["circuit"] == "open", 30, "the circuit open")
        opened = len(server.completed)

        def since_open() -> list[str | None]:
            return [d.headers.get("webhook-event-type") for d in server.completed[opened:]]

        # The open circuit's probes (1 s, then 2 s apart) are the clock: longer than the interval.
        await wait_until(lambda: since_open().count("webhook.ping") >= 2, 30, "two probes")
        assert "webhook.heartbeat" not in since_open(), "no heartbeat while the circuit is open"
