"""Retries, Retry-After, 410, the circuit breaker, max_age, dead letters and replay.

One worker with short clocks (see the harness); each receiver overrides its
retry policy where a test needs a specific schedule.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaProducer
from standardwebhooks import Webhook

from dispatcher.actor_runner import MAX_DEAD_LETTER_CONTENT
from dispatcher.broker import EmbeddedBroker
from tests.harness import Api, Delivery, Receiver, WorkerProcess, first_copies, wait_until

pytestmark = pytest.mark.integration


def messages(rid: str, n: int, start: int = 0) -> list[dict[str, Any]]:
    return [{"receiver_id": rid, "event_type": "t.x", "payload": {"n": i}} for i in range(start, start + n)]


def is_ping(d: Delivery) -> bool:
    return d.headers.get("webhook-event-type") == "webhook.ping"


async def test_three_failures_then_success_keeps_order_without_gaps(api: Api) -> None:
    failures = {"left": 3}

    async def behaviour(path: str, d: Delivery) -> int:
        if d.seq == 1 and failures["left"] > 0:
            failures["left"] -= 1
            return 500
        return 200

    recv = await Receiver(behaviour).start()
    try:
        rid = (await api.create_receiver(recv.url("flaky")))["id"]
        await api.send_batch(messages(rid, 5))
        await wait_until(lambda: len(recv.completed) == 8, 30, "3 failed + 5 good requests")
        assert [d.seq for d in recv.deliveries] == [1, 1, 1, 1, 2, 3, 4, 5]
        assert len({d.msg_id for d in recv.deliveries[:4]}) == 1, "a retry keeps its webhook-id"
        state = await api.eventually_state(rid, lambda s: s["delivered"] == 5, 10, "5 delivered")
        assert (state["failed_attempts"], state["backlog"], state["circuit"]) == (3, 0, "closed")

        status, log = await api.call("GET", f"/v1/receivers/{rid}/attempts")
        assert status == 200
        assert [(a["seq"], a["status"], a["attempt"]) for a in log["attempts"]][::-1] == [
            (1, 500, 1), (1, 500, 2), (1, 500, 3), (1, 200, 4), (2, 200, 1), (3, 200, 1), (4, 200, 1),
            (5, 200, 1),
        ]
        status, last = await api.call("GET", f"/v1/receivers/{rid}/last-response")
        assert status == 200 and (last["seq"], last["status"], last["body_prefix"]) == (5, 200, "ok")
    finally:
        await recv.stop()


async def test_retry_after_on_429_is_respected(api: Api) -> None:
    async def behaviour(path: str, d: Delivery) -> int | tuple[int, dict[str, str]]:
        return (429, {"Retry-After": "2"}) if len(recv.deliveries) == 1 else 200

    recv = await Receiver(behaviour).start()
    try:
        rid = (await api.create_receiver(recv.url("limited")))["id"]
        await api.send_batch(messages(rid, 2))
        await wait_until(lambda: len(recv.completed) == 3, 30, "429, then the retry and the next")
        first, retry = recv.deliveries[0], recv.deliveries[1]
        assert retry.seq == first.seq == 1 and retry.msg_id == first.msg_id
        assert retry.at - first.at >= 2.0, f"retried after {retry.at - first.at:.3f}s despite Retry-After: 2"
    finally:
        await recv.stop()


async def test_410_disables_parks_the_backlog_and_enable_drains_it(api: Api) -> None:
    async def behaviour(path: str, d: Delivery) -> int:
        return 410 if len(recv.deliveries) == 1 else 200

    recv = await Receiver(behaviour).start()
    try:
        rid = (await api.create_receiver(recv.url("gone")))["id"]
        await api.send_batch(messages(rid, 3))
        state = await api.eventually_state(rid, lambda s: s["disabled"], 20, "disabled by 410")
        assert state["status"] == "disabled" and "410" in state["disabled_reason"]
        await api.send_batch(messages(rid, 2, start=3))  # accepted and parked too
        await asyncio.sleep(1.5)  # would be several retries and probes if any were sent
        assert len(recv.deliveries) == 1
        state = await api.state(rid)
        assert (state["backlog"], state["head_seq"]) == (5, 1)

        status, body = await api.call("POST", f"/v1/receivers/{rid}/enable")
        assert status == 200 and body["state"]["disabled"] is False
        await wait_until(lambda: len(recv.completed) == 6, 30, "the parked backlog")
        assert [d.seq for d in recv.deliveries] == [1, 1, 2, 3, 4, 5]
    finally:
        await recv.stop()


async def test_breaker_opens_sends_only_pings_then_drains_in_order(api: Api) -> None:
    down = {"on": True}

    async def behaviour(path: str, d: Delivery) -> int:
        return 503 if down["on"] else 200

    recv = await Receiver(behaviour).start()
    try:
        rid = (await api.create_receiver(recv.url("down")))["id"]
        await api.send_batch(messages(rid, 10))
        await wait_until(lambda: sum(map(is_ping, recv.deliveries)) >= 4, 30, "4 probes")
        state = await api.state(rid)
        assert state["circuit"] == "open" and state["backlog"] == 10
        sent = [d for d in recv.deliveries if not is_ping(d)]
        assert [d.seq for d in sent] == [1] * 5, "only the 5 attempts that opened the circuit"
        for ping in filter(is_ping, recv.deliveries):
            assert "webhook-sequence" not in ping.headers
        pings_while_down = sum(map(is_ping, recv.deliveries))

        down["on"] = False
        await wait_until(lambda: len({d.msg_id for d in recv.completed if not is_ping(d)}) == 10, 30, "drain")
        sent = [d for d in recv.deliveries if not is_ping(d)]
        assert [d.seq for d in first_copies(sent)] == list(range(1, 11))
        state = await api.eventually_state(rid, lambda s: s["delivered"] == 10, 10, "delivered")
        assert state["circuit"] == "closed"
        status, log = await api.call("GET", f"/v1/receivers/{rid}/attempts?limit=100")
        assert status == 200
        kinds = [a["kind"] for a in log["attempts"]]
        assert kinds.count("probe") >= pings_while_down
        print(f"\nbreaker: 5 attempts, {pings_while_down} probes while down, then 10 delivered in order")
    finally:
        await recv.stop()


async def test_max_age_dead_letters_with_a_seq_gap_and_replay_delivers_them(api: Api) -> None:
    down = {"on": True}

    async def behaviour(path: str, d: Delivery) -> int:
        return 503 if down["on"] else 200

    recv = await Receiver(behaviour).start()
    try:
        created = await api.create_receiver(recv.url("aged"), retry={"max_age": 2})
        rid = created["id"]
        await api.send_batch(messages(rid, 3))
        state = await api.eventually_state(rid, lambda s: s["dead_lettered"] == 3, 30, "3 dead letters")
        assert state["backlog"] == 0
        status, body = await api.call("GET", f"/v1/receivers/{rid}/dead-letters")
        assert status == 200
        letters = body["dead_letters"]
        assert [(x["seq"], x["reason"]) for x in letters] == [(1, "max_age"), (2, "max_age"), (3, "max_age")]
        assert letters[0]["last_status"] == 503 and letters[0]["attempts"] >= 1
        assert [(x["attempts"], x["last_status"]) for x in letters[1:]] == [(0, None), (0, None)]
        assert [x["message"]["data"] for x in letters] == [{"n": 0}, {"n": 1}, {"n": 2}]

        down["on"] = False
        await api.send_batch(messages(rid, 1, start=3))
        await wait_until(lambda: any(d.seq == 4 for d in recv.completed), 30, "seq 4")
        assert [d.seq for d in recv.completed if d.seq > 1] == [4]  # the receiver sees the gap 2-3

        status, body = await api.call("POST", f"/v1/receivers/{rid}/replay", {"from_seq": 1, "to_seq": 3})
        assert status == 202 and body["replayed"] == 3
        await wait_until(lambda: any(d.seq == 7 for d in recv.completed), 30, "the replays")
        replays = [d for d in recv.completed if not is_ping(d) and d.seq > 4]
        assert [(d.seq, d.headers["webhook-replay-of"]) for d in replays] == [(5, "1"), (6, "2"), (7, "3")]
        assert [d.msg_id for d in replays] == [m["id"] for m in body["messages"]]
        verifier = Webhook(created["secret"])
        assert [verifier.verify(d.body, d.headers)["data"] for d in replays] == [{"n": 0}, {"n": 1}, {"n": 2}]
    finally:
        await recv.stop()


async def test_a_dead_letter_kept_without_its_data_is_sent_again_whole_from_the_kept_copy(
    api: Api, worker: WorkerProcess, broker: EmbeddedBroker
) -> None:
    """A direct producer's message over the dead letter's cap keeps a summary of its data only; replay
    and recover send it again whole from the receiver's kept copy (DISPATCHER_RETAIN_SECONDS), never
    without its data (test_resend_recover.py: once no copy is kept, it is skipped)."""
    refused = {"on": True}

    async def behaviour(path: str, d: Delivery) -> int:
        return 400 if refused["on"] else 200

    recv = await Receiver(behaviour).start()
    try:
        rid = (await api.create_receiver(recv.url("big")))["id"]
        blob = await produce_big(broker, worker, rid)
        await api.eventually_state(rid, lambda s: s["dead_lettered"] == 1, 30, "the dead letter")
        status, body = await api.call("GET", f"/v1/receivers/{rid}/dead-letters")
        letter = body["dead_letters"][0]["message"]
        assert (letter["data"], letter["data_summary"]["size"]) == (None, len(orjson.dumps({"blob": blob})))

        refused["on"] = False
        status, body = await api.call("POST", f"/v1/receivers/{rid}/replay", {})
        assert status == 202 and body["skipped_seqs"] == [], body
        status, again = await api.call("POST", f"/v1/receivers/{rid}/recover", {"since": 0})
        assert status == 202 and [m["replay_of"] for m in again["messages"]] == [1], again
        await wait_until(lambda: len(first_copies(recv.completed)) == 3, 30, "both copies of seq 1")
        copies = first_copies(recv.completed)[1:]
        assert [(d.headers["webhook-replay-of"], orjson.loads(d.body)["data"]) for d in copies] == [
            ("1", {"blob": blob}), ("1", {"blob": blob})]
    finally:
        await recv.stop()


async def produce_big(broker: EmbeddedBroker, worker: WorkerProcess, rid: str) -> str:
    """A message over the dead letter's cap, straight to Kafka (the API caps payloads well below it)."""
    producer = AIOKafkaProducer(bootstrap_servers=broker.url.removeprefix("kafka://"), acks="all",
                                max_request_size=2 * MAX_DEAD_LETTER_CONTENT)
    await producer.start()
    try:
        blob = "B" * (MAX_DEAD_LETTER_CONTENT + 1000)
        big = {"id": "big-1", "event_type": "t.big", "payload": {"blob": blob}}
        await producer.send_and_wait(f"{worker.app_id}.requests", orjson.dumps(big), key=rid.encode())
    finally:
        await producer.stop()
    return blob


async def test_pause_holds_and_resume_delivers(api: Api, receiver: Receiver) -> None:
    rid = (await api.create_receiver(receiver.url("paused")))["id"]
    status, body = await api.call("POST", f"/v1/receivers/{rid}/pause", {"reason": "maintenance"})
    assert status == 200 and body["state"]["status"] == "paused"
    await api.send_batch(messages(rid, 3))
    await asyncio.sleep(1.0)
    assert receiver.deliveries == []
    status, body = await api.call("POST", f"/v1/receivers/{rid}/resume")
    assert status == 200 and body["state"]["paused"] is False
    await wait_until(lambda: len(receiver.completed) == 3, 30, "3 deliveries")
    assert [d.seq for d in receiver.deliveries] == [1, 2, 3]


async def test_ping_now_returns_the_response_and_is_signed(api: Api, receiver: Receiver) -> None:
    created = await api.create_receiver(receiver.url("ping"))
    status, body = await api.call("POST", f"/v1/receivers/{created['id']}/ping")
    assert status == 200, body
    assert (body["ok"], body["status"], body["body_prefix"]) == (True, 200, "ok")
    (ping,) = receiver.deliveries
    event = Webhook(created["secret"]).verify(ping.body, ping.headers)
    assert event["type"] == "webhook.ping" and event["data"] == {"receiver_id": created["id"]}
    status, last = await api.call("GET", f"/v1/receivers/{created['id']}/last-response")
    while status == 404:  # the ping's outcome reaches the attempt log through the stream
        await asyncio.sleep(0.05)
        status, last = await api.call("GET", f"/v1/receivers/{created['id']}/last-response")
    assert last["kind"] == "ping" and last["status"] == 200


async def test_bad_retry_override_names_the_field(api: Api, receiver: Receiver) -> None:
    status, body = await api.call(
        "POST", "/v1/receivers", {"url": receiver.url("x"), "retry": {"schedule": [1, "often"]}}
    )
    assert status == 422 and body["error"]["field"] == "retry.schedule[1]"
    status, body = await api.call("POST", "/v1/receivers/nobody/replay", {})
    assert status == 404 and body["error"]["field"] == "receiver_id"
