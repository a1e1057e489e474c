"""One worker on the embedded broker, real receivers on 127.0.0.1."""

from __future__ import annotations

import asyncio

import orjson
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from dispatcher.broker import EmbeddedBroker
from tests.harness import Api, Receiver, WorkerProcess, wait_until, wait_until_read

pytestmark = pytest.mark.integration


async def test_standard_webhooks_library_accepts_every_delivery(api: Api, receiver: Receiver) -> None:
    created = await api.create_receiver(receiver.url("verify"), event_types=["invoice.paid"])
    assert created["secret"].startswith("whsec_")
    payloads = [{"n": i, "text": "ünïcode ✓", "nested": {"list": [1, 2.5, None]}} for i in range(20)]
    await api.send_batch(
        [{"receiver_id": created["id"], "event_type": "invoice.paid", "payload": p} for p in payloads]
    )
    await wait_until(lambda: len(receiver.deliveries) >= 20, 30, "20 deliveries")

    verifier = Webhook(created["secret"])
    for i, delivery in enumerate(receiver.deliveries):
        body = verifier.verify(delivery.body, delivery.headers)
        assert body["type"] == "invoice.paid"
        assert body["data"] == payloads[i]
        assert body["timestamp"].endswith("Z")
        assert delivery.headers["webhook-sequence"] == str(i + 1)
        assert delivery.headers["webhook-event-type"] == "invoice.paid"
        assert delivery.headers["content-type"] == "application/json"


async def test_tampered_body_fails_verification(api: Api, receiver: Receiver) -> None:
    created = await api.create_receiver(receiver.url("tamper"))
    await api.send_batch([{"receiver_id": created["id"], "event_type": "a.b", "payload": {"x": 1}}])
    await wait_until(lambda: len(receiver.deliveries) == 1, 30, "one delivery")
    delivery = receiver.deliveries[0]
    with pytest.raises(WebhookVerificationError):
        Webhook(created["secret"]).verify(delivery.body.replace(b"1", b"2"), delivery.headers)


async def test_same_message_id_three_times_is_delivered_once(api: Api, receiver: Receiver) -> None:
    created = await api.create_receiver(receiver.url("dedup"))
    rid = created["id"]
    for _ in range(3):
        status, body = await api.call(
            "POST", "/v1/messages",
            {"receiver_id": rid, "event_type": "a.b", "payload": {"v": 1}, "id": "order-42"},
        )
        assert status == 202 and body["id"] == "order-42"
    # A later message proves the duplicates were processed (and dropped), not pending.
    await api.send_batch([{"receiver_id": rid, "event_type": "a.b", "payload": {"v": 2}, "id": "after"}])
    await wait_until(lambda: any(d.msg_id == "after" for d in receiver.deliveries), 30, "sentinel")
    ids = [d.msg_id for d in receiver.deliveries]
    assert ids == ["order-42", "after"]
    assert [d.seq for d in receiver.deliveries] == [1, 2]


async def test_failing_receiver_gets_head_retried_with_same_id_and_seq(api: Api) -> None:
    failures = {"left": 3}

    async def flaky(path: str, delivery: object) -> int:
        if failures["left"] > 0:
            failures["left"] -= 1
            return 503
        return 200

    recv = await Receiver(flaky).start()
    try:
        created = await api.create_receiver(recv.url("flaky"))
        await api.send_batch(
            [{"receiver_id": created["id"], "event_type": "a.b", "payload": i} for i in range(3)]
        )
        await wait_until(lambda: len(recv.completed) == 6, 30, "3 failures + 3 deliveries")
        assert [d.seq for d in recv.deliveries] == [1, 1, 1, 1, 2, 3]
        assert len({d.msg_id for d in recv.deliveries[:4]}) == 1
        status, state = await api.call("GET", f"/v1/receivers/{created['id']}")
        assert status == 200
        assert state["state"]["delivered_seq"] == 3
        assert state["state"]["failed_attempts"] == 3
        assert state["state"]["last_response"]["status"] == 200
        assert "secret" not in state
    finally:
        await recv.stop()


async def test_api_rejects_bad_input_naming_the_field(api: Api, receiver: Receiver) -> None:
    created = await api.create_receiver(receiver.url("bad"))
    rid = created["id"]
    cases = [
        ({"receiver_id": rid, "event_type": "a.b", "payload": 1, "id": "has space"}, 422, "id"),
        ({"receiver_id": rid, "payload": 1}, 422, "event_type"),
        ({"receiver_id": rid, "event_type": "a.b"}, 422, "payload"),
        ({"receiver_id": rid, "event_type": "a.b", "payload": 1, "headers": {"X-A": "1\r\nX-B: 2"}},
         422, "headers.X-A"),
        ({"receiver_id": rid, "event_type": "a.b", "payload": 1, "headers": {"webhook-id": "x"}},
         422, "headers.webhook-id"),
        ({"receiver_id": "no-such-receiver", "event_type": "a.b", "payload": 1}, 404, "receiver_id"),
        ({"receiver_id": rid, "event_type": "a.b", "payload": "x" * 300_000}, 413, "payload"),
    ]
    for body, status, field in cases:
        got, answer = await api.call("POST", "/v1/messages", body)
        assert (got, answer["error"]["field"]) == (status, field), answer
    status, answer = await api.call("POST", "/v1/receivers", {"url": "ftp://example.test/x"})
    assert (status, answer["error"]["field"]) == (422, "url")
    # One bad message rejects the whole batch and sends none of it.
    batch = [{"receiver_id": rid, "event_type": "a.b", "payload": 1}, {"receiver_id": rid}]
    status, answer = await api.call("POST", "/v1/messages/batch", {"messages": batch})
    assert (status, answer["error"]["field"]) == (422, "messages[1].event_type")
    await api.send_batch([{"receiver_id": rid, "event_type": "a.b", "payload": "ok", "id": "only"}])
    await wait_until(lambda: len(receiver.deliveries) == 1, 30, "one delivery")
    await asyncio.sleep(0.5)
    assert [d.msg_id for d in receiver.deliveries] == ["only"]


async def test_query_numbers_take_ascii_digits_only(api: Api, receiver: Receiver) -> None:
    """int() takes "1_000", " 12 " and "١٢" (Arabic-Indic digits): a query number must be plain digits."""
    rid = (await api.create_receiver(receiver.url("q")))["id"]
    for path in (f"/v1/receivers/{rid}/events?after_seq=", f"/v1/receivers/{rid}/dead-letters?limit=",
                 "/v1/receivers?limit="):
        field = path.rsplit("?", 1)[1].rstrip("=")
        for bad in ("١٢", "1_0", "%2012", "-1", "1e2", "99999999999999999999999"):
            status, answer = await api.call("GET", path + bad)
            assert (status, answer["error"]["field"]) == (422, field), (path, bad, answer)
        assert (await api.call("GET", path + "12"))[0] == 200, path


async def test_last_response_tells_a_receiver_without_attempts_from_an_unknown_one(
    api: Api, receiver: Receiver
) -> None:
    rid = (await api.create_receiver(receiver.url("last")))["id"]
    status, answer = await api.call("GET", f"/v1/receivers/{rid}/last-response")
    assert (status, answer["error"]) == (
        404, {"code": "no_attempt", "field": "receiver_id", "message": "no attempt yet"}
    )
    status, answer = await api.call("GET", "/v1/receivers/nobody-here/last-response")
    assert (status, answer["error"]["code"], answer["error"]["field"]) == (404, "not_found", "receiver_id")
    await api.send_batch([{"receiver_id": rid, "event_type": "a.b", "payload": 1}])
    await wait_until(lambda: len(receiver.completed) == 1, 30, "the delivery")
    last = await wait_until_read(
        lambda: api.call("GET", f"/v1/receivers/{rid}/last-response"), lambda r: r[0] == 200, 30, "its record"
    )
    assert (last[1]["kind"], last[1]["status"], last[1]["seq"]) == ("message", 200, 1)


async def test_invalid_json_is_400_with_position(worker: WorkerProcess, api: Api) -> None:
    async with api._session.post(worker.url + "/v1/messages", data=b'{"receiver_id": ') as resp:
        body = await resp.json()
    assert resp.status == 400
    assert body["error"]["code"] == "invalid_json" and "char 16" in body["error"]["message"]


async def test_v1_requires_the_bearer_token(worker: WorkerProcess) -> None:
    for token in ("", "wrong"):
        client = Api(worker.url, token)
        try:
            status, body = await client.call("POST", "/v1/receivers", {"url": "http://127.0.0.1:1/"})
        finally:
            await client.close()
        assert status == 401 and body["error"]["field"] == "Authorization"
    health = Api(worker.url, "")
    try:
        assert (await health.call("GET", "/healthz"))[0] == 200
        assert (await health.call("GET", "/readyz"))[0] == 200
    finally:
        await health.close()


async def test_malformed_kafka_record_is_dead_lettered_and_does_not_stall(
    broker: EmbeddedBroker, worker: WorkerProcess, api: Api, receiver: Receiver
) -> None:
    """A record a direct producer got wrong is dead-lettered with its raw bytes; the partition moves on."""
    created = await api.create_receiver(receiver.url("poison"))
    rid = created["id"]
    bootstrap = broker.url.removeprefix("kafka://")
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        requests = f"{worker.app_id}.requests"
        await producer.send_and_wait(requests, b"{not json", key=rid.encode())
        await producer.send_and_wait(requests, orjson.dumps({"event_type": "a.b"}), key=rid.encode())
        injected = {"event_type": "a.b", "payload": {}, "headers": {"X-A": "1\r\nX-Evil: 2"}}
        await producer.send_and_wait(requests, orjson.dumps(injected), key=rid.encode())
        good = {"id": "direct-1", "event_type": "a.b", "payload": {"ok": True}}
        await producer.send_and_wait(requests, orjson.dumps(good), key=rid.encode())
    finally:
        await producer.stop()
    await wait_until(lambda: len(receiver.deliveries) == 1, 30, "the good record")
    assert receiver.deliveries[0].msg_id == "direct-1"

    assert "x-evil" not in receiver.deliveries[0].headers

    letters = await _read_topic(bootstrap, f"{worker.app_id}.dead-letters", 3)
    mine = [letter for letter in letters if letter["receiver_id"] == rid]
    assert [letter["reason"] for letter in mine] == ["malformed"] * 3
    assert mine[0]["raw"] == "{not json"
    assert "payload" in mine[1]["detail"]
    assert "headers.X-A" in mine[2]["detail"] and "X-Evil" in mine[2]["raw"]


async def _read_topic(bootstrap: str, topic: str, at_least: int) -> list[dict]:
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    records: list[dict] = []
    try:
        async with asyncio.timeout(30):
            while len(records) < at_least:
                batch = await consumer.getmany(timeout_ms=500)
                records += [orjson.loads(r.value) for rs in batch.values() for r in rs]
    finally:
        await consumer.stop()
    return records



async def test_the_started_worker_keeps_its_app_out_of_the_collectors_sight(worker: WorkerProcess) -> None:
    """Start-up's objects are frozen (a full collection does not walk them) and collections are spaced."""
    await wait_until_read(worker.readyz, lambda r: r["collector"]["frozen"] > 0, 30, "the collector settled")
    collector = (await worker.readyz())["collector"]
    assert collector["frozen"] > 10_000, collector  # Faust, aiokafka and the modules
    assert collector["threshold"] == [7000, 20, 20]
    assert [set(g) for g in collector["generations"]] == [{"collections", "collected"}] * 3
