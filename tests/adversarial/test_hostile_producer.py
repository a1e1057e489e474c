"""Hostile producers writing straight to Kafka: nothing they write reroutes, stalls or leaks.

A producer allowed to write the requests and events topics tries to
reconfigure a canary receiver (upsert to another URL with its own secret,
pause, delete), sends poison records near the broker's size limit (one
compressed to a fraction of its size), timestamps in milliseconds and far in
the future, and an event whose copies would not fit in a record. The canary
must see only its own good messages, in order; every bad record must be
dead-lettered with a bounded summary and no secret; and the good record
after the poison must still be delivered.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from dispatcher.broker import EmbeddedBroker
from dispatcher.domain.events import copy_id
from tests.harness import Api, Receiver, WorkerProcess, wait_until, wait_until_read

pytestmark = [pytest.mark.integration, pytest.mark.adversarial]

EVIL_SECRET = "whsec_" + "RVZJTA" * 6
POISON_SIZE = 900_000
NEAR_LIMIT_EVENT = 997_000  # fits in a 1 MB record; its copies, a little larger, would not


@pytest.fixture
async def producer(broker: EmbeddedBroker) -> AsyncIterator[AIOKafkaProducer]:
    bootstrap = broker.url.removeprefix("kafka://")
    plain = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", max_request_size=2_000_000)
    await plain.start()
    yield plain
    await plain.stop()


async def _read_topic(bootstrap: str, topic: str, done: Any) -> list[bytes]:
    """Raw records of `topic` until `done(records)` holds (bounded: 60 s)."""
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                fetch_max_bytes=8 << 20, max_partition_fetch_bytes=8 << 20)
    await consumer.start()
    records: list[bytes] = []
    try:
        async with asyncio.timeout(60):
            while not done(records):
                batch = await consumer.getmany(timeout_ms=500)
                records += [r.value for rs in batch.values() for r in rs if r.value is not None]
    finally:
        await consumer.stop()
    return records


async def test_a_producer_cannot_reconfigure_stall_or_leak(
    broker: EmbeddedBroker, worker: WorkerProcess, api: Api, receiver: Receiver,
    producer: AIOKafkaProducer,
) -> None:
    canary = await api.create_receiver(receiver.url("canary"), event_types=["canary.evt"])
    rid, key = canary["id"], canary["id"].encode()
    requests, events = f"{worker.app_id}.requests", f"{worker.app_id}.events"
    hijack = {"id": rid, "url": receiver.url("evil"), "secret": EVIL_SECRET, "created_at": 0}
    for record in ({"kind": "receiver.upsert", "receiver": hijack},
                   {"kind": "receiver.control", "action": "pause"},
                   {"kind": "receiver.control", "action": "delete"}):
        await producer.send_and_wait(requests, orjson.dumps(record), key=key)
    poison = b"\x00not json" + b"P" * (POISON_SIZE - 9)
    await producer.send_and_wait(requests, poison, key=key)
    msec = {"id": "msec-1", "event_type": "t.x", "payload": {}, "accepted_at": 1.8e12}
    await producer.send_and_wait(requests, orjson.dumps(msec), key=key)
    future = {"id": "future-1", "event_type": "t.x", "payload": {}, "accepted_at": 4e9}
    await producer.send_and_wait(requests, orjson.dumps(future), key=key)
    good = {"id": "after-poison", "event_type": "t.x", "payload": {"ok": True}}
    await producer.send_and_wait(requests, orjson.dumps(good), key=key)
    big_event = {"id": "evt-big", "event_type": "canary.evt", "payload": "E" * NEAR_LIMIT_EVENT}
    await producer.send_and_wait(events, orjson.dumps(big_event), key=b"evt-big")
    await producer.send_and_wait(events, b"{broken", key=b"evt-broken")
    small_event = {"id": "evt-small", "event_type": "canary.evt", "payload": {"n": 1}}
    await producer.send_and_wait(events, orjson.dumps(small_event), key=b"evt-small")

    await wait_until(lambda: len(receiver.by_path("canary")) >= 4, 60, "the canary's good records")
    got = [d.msg_id for d in receiver.by_path("canary")]
    assert got[:3] == ["msec-1", "future-1", "after-poison"], got
    assert len(got) == 4 and got[3].startswith("evt_"), got  # the small event's copy; not the big one
    assert receiver.by_path("evil") == []
    state = await api.state(rid)
    assert not state["paused"] and state["delivered"] == 4, state
    status, view = await api.call("GET", f"/v1/receivers/{rid}")
    assert status == 200 and view["url"] == receiver.url("canary")
    for msg_id in ("msec-1", "future-1"):
        status, body = await api.call("GET", f"/v1/receivers/{rid}/messages/{msg_id}")
        assert status == 200 and body["status"] == "delivered" and "out of range" in body["time_note"], body

    bootstrap = broker.url.removeprefix("kafka://")
    letters = await _read_topic(
        bootstrap, f"{worker.app_id}.dead-letters",
        lambda rs: sum(1 for r in rs if rid.encode() in r or b"evt-big" in r or b"kafka_" in r) >= 6,
    )
    assert not any(EVIL_SECRET.encode() in r for r in letters), "a secret reached a dead letter"
    mine = [orjson.loads(r) for r in letters]
    forbidden = [x for x in mine if x["reason"] == "forbidden_record" and x["receiver_id"] == rid]
    assert len(forbidden) == 3 and all(x["raw"] == "" and x["raw_size"] > 0 for x in forbidden), forbidden
    [poisoned] = [x for x in mine if x.get("raw_size") == POISON_SIZE]
    assert poisoned["reason"] == "malformed" and poisoned["raw_truncated"] and len(poisoned["raw"]) <= 2048
    assert poisoned["raw_sha256"] == hashlib.sha256(poison).hexdigest()
    [too_large] = [x for x in mine if x.get("event_id") == "evt-big"]
    assert too_large["reason"] == "too_large" and too_large["raw_size"] > NEAR_LIMIT_EVENT
    assert all(len(r) < 64 * 1024 for r in letters if b"evt-big" in r or b'"malformed"' in r)


async def test_a_compressed_poison_record_is_dead_lettered_and_the_partition_goes_on(
    broker: EmbeddedBroker, worker: WorkerProcess, api: Api, receiver: Receiver,
) -> None:
    """8 MB of zeros gzip to a few kB: small on the wire, large once read; it moves on all the same."""
    rid = (await api.create_receiver(receiver.url("zip")))["id"]
    bootstrap = broker.url.removeprefix("kafka://")
    zipped = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", compression_type="gzip",
                              max_request_size=16 << 20)
    await zipped.start()
    try:
        requests = f"{worker.app_id}.requests"
        await zipped.send_and_wait(requests, b"0" * (8 << 20), key=rid.encode())
        good = {"id": "after-zip", "event_type": "t.x", "payload": {}}
        await zipped.send_and_wait(requests, orjson.dumps(good), key=rid.encode())
    finally:
        await zipped.stop()
    await wait_until(lambda: len(receiver.by_path("zip")) == 1, 60, "the record after the poison")
    assert receiver.by_path("zip")[0].msg_id == "after-zip"
    state = await wait_until_read(lambda: api.state(rid), lambda s: s["delivered"] == 1, 30, "delivered")
    assert state["backlog"] == 0


async def test_a_record_key_or_field_cannot_forge_a_log_line_or_field(
    broker: EmbeddedBroker, worker: WorkerProcess, producer: AIOKafkaProducer
) -> None:
    """A rejected record's key and the field it named go to the log: a newline in either would start
    a line of the producer's making, and a space a `reason=` of its own."""
    forged = "[2026-11-29 12:00:00,000] [1] [INFO] receiver_id=rcv_payroll delivered msg_id=FORGED"
    requests = f"{worker.app_id}.requests"
    await producer.send_and_wait(requests, b"{}", key=f"rcv_x\n{forged} reason=planted\u2028".encode())
    # A header name is refused with the name in the error: the detail carries the producer's text.
    named = {"id": "m-1", "event_type": "t.x", "payload": {}, "headers": {f"x\n{forged} seq=7": "v"}}
    await producer.send_and_wait(requests, orjson.dumps(named), key=b"rcv_field")
    event = {"event_type": "a.b", "payload": 1, f"x\n{forged}": 1}  # an unknown field, named
    await producer.send_and_wait(f"{worker.app_id}.events", orjson.dumps(event), key=b"evt-forge")

    def rejected() -> list[str]:
        return [line for line in worker.log_path.read_text(errors="replace").splitlines()
                if ("dead-lettered" in line and ("rcv_x" in line or "rcv_field" in line))
                or ("not fanned out" in line and "x\\x0a[2026-11-29" in line)]

    await wait_until(lambda: len(rejected()) == 3, 30, "the three records dead-lettered")
    lines = worker.log_path.read_text(errors="replace").splitlines()
    assert not [line for line in lines if line.startswith("[2026-11-29 12:00:00,000]")], "a forged line"
    assert all("reason=planted" not in line and "seq=7" not in line for line in rejected()), rejected()
    assert any("receiver_id=rcv_x\\x0a\\x5b2026" in line for line in rejected()), rejected()
    assert any("headers.x\\x0a[2026-11-29" in line for line in rejected()), rejected()


async def test_a_producer_cannot_claim_a_replay_or_a_fan_out_copy_to_pass_a_filter(
    worker: WorkerProcess, api: Api, receiver: Receiver, producer: AIOKafkaProducer,
) -> None:
    """`replay_of` and `from_event` pass a receiver's filter unmatched: only a worker's record sets them."""
    made = await api.create_receiver(receiver.url("filtered"), filter={"payload": {"ok": True}})
    rid, key = made["id"], made["id"].encode()
    requests = f"{worker.app_id}.requests"
    claims = [{"replay_of": 1}, {"from_event": True, "time_note": "planted"},
              {"replay_of": 1, "from_event": True}]
    for n, claim in enumerate(claims):
        forged = {"id": f"forged-{n}", "event_type": "t.x", "payload": {"ok": False}, **claim}
        await producer.send_and_wait(requests, orjson.dumps(forged), key=key)
    # A forged header on a record the filter takes: delivered as the plain message it is.
    passing = {"id": "claims-replay", "event_type": "t.x", "payload": {"ok": True}, "replay_of": 7}
    await producer.send_and_wait(requests, orjson.dumps(passing), key=key)
    await wait_until(lambda: len(receiver.by_path("filtered")) >= 1, 60, "the record the filter takes")
    for n in range(len(claims)):
        status, body = await api.call("GET", f"/v1/receivers/{rid}/messages/forged-{n}")
        assert status == 200 and body["status"] == "filtered", body
    [got] = receiver.by_path("filtered")
    assert got.msg_id == "claims-replay" and "webhook-replay-of" not in got.headers, got.headers
    status, body = await api.call("GET", f"/v1/receivers/{rid}/messages/claims-replay")
    assert status == 200 and body["status"] == "delivered" and not body.get("time_note"), body
    suspect = f"receiver_id={rid} partition="
    logged = worker.log_path.read_text(errors="replace").count(suspect)
    assert 1 <= logged <= len(claims) + 1, "forged claims are logged, at most a line per 10 s"
    # The API's resend is a worker's sealed record: it passes the filter now refusing everything,
    # and says what it copies.
    real = {"receiver_id": rid, "event_type": "t.x", "payload": {"ok": True}, "id": "real-1"}
    status, body = await api.call("POST", "/v1/messages", real)
    assert status == 202, body
    await wait_until(lambda: len(receiver.by_path("filtered")) == 2, 60, "the API's message")
    status, body = await api.call("PATCH", f"/v1/receivers/{rid}", {"filter": {"payload": {"ok": "never"}}})
    assert status == 200, body
    status, body = await api.call("POST", f"/v1/receivers/{rid}/messages/real-1/resend", {"id": "again-1"})
    assert status == 202, body
    await wait_until(lambda: len(receiver.by_path("filtered")) == 3, 60, "the resent copy")
    resent = receiver.by_path("filtered")[2]
    assert resent.msg_id == "again-1" and resent.headers["webhook-replay-of"] == str(body["resend_of"]["seq"])
    # A producer's record taking the id of an event's copy, or of an id-less record, goes by its own
    # position's id instead: the real one, when it comes, is no duplicate of it.
    status, body = await api.call("PATCH", f"/v1/receivers/{rid}", {"filter": {"payload": {"ok": True}}})
    assert status == 200, body
    event_copy = copy_id("evt-later", rid)
    for taken in (event_copy, "kafka_0_999999"):
        await producer.send_and_wait(requests, orjson.dumps({"id": taken, "event_type": "t.x",
                                                             "payload": {"ok": True}}), key=key)
    await wait_until(lambda: len(receiver.by_path("filtered")) == 5, 60, "the two records taking ids")
    renamed = [d.msg_id for d in receiver.by_path("filtered")[3:]]
    assert all(m.startswith("kafka_") and m not in (event_copy, "kafka_0_999999") for m in renamed), renamed
    for taken in (event_copy, "kafka_0_999999"):
        status, body = await api.call("GET", f"/v1/receivers/{rid}/messages/{taken}")
        assert status == 404, body
