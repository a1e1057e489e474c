"""One trace per message, across the Kafka hop: API intake -> (fan-out) -> delivery attempt.

The worker exports its spans with the SDK's console exporter (OTEL_TRACES_EXPORTER=console:
one JSON object per line in its log), read back here; tests/unit/test_tracing.py checks the
same hooks in-process with the SDK's in-memory exporter.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import orjson
import pytest
from aiokafka import AIOKafkaProducer

from dispatcher.broker import EmbeddedBroker
from tests.harness import TOKEN, Api, Receiver, WorkerProcess, wait_until

pytestmark = pytest.mark.integration

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
PRODUCER_TRACE = "0af7651916cd43dd8448eb211c80319c"
PRODUCER_SPAN = "b7ad6b7169203331"
OPTED_IN = "rcv_wants_traceparent"  # DISPATCHER_TRACE_RECEIVERS


@pytest.fixture(scope="module")
async def worker(make_module_worker: Callable[..., WorkerProcess]) -> AsyncIterator[WorkerProcess]:
    proc = make_module_worker(OTEL_TRACES_EXPORTER="console", OTEL_BSP_SCHEDULE_DELAY="50",
                              OTEL_SERVICE_NAME="dispatcher-under-test", DISPATCHER_TRACE_RECEIVERS=OPTED_IN)
    await proc.wait_ready()
    yield proc


def spans(worker: WorkerProcess) -> list[dict[str, Any]]:
    found = []
    for line in worker.log_path.read_text().splitlines():
        if line.startswith("{") and '"trace_id"' in line:
            found.append(orjson.loads(line))
    return found


def trace_of(span: dict[str, Any]) -> str:
    return str(span["context"]["trace_id"]).removeprefix("0x")


def span_id(span: dict[str, Any]) -> str:
    return str(span["context"]["span_id"]).removeprefix("0x")


def parent_of(span: dict[str, Any]) -> str:
    return str(span.get("parent_id") or "").removeprefix("0x")


def delivery_of(worker: WorkerProcess, msg_id: str) -> list[dict[str, Any]]:
    return [s for s in spans(worker)
            if s["name"] == "webhook.deliver" and s["attributes"].get("webhook.message_id") == msg_id]


async def test_api_message_is_one_trace_under_the_callers_traceparent(
    worker: WorkerProcess, api: Api
) -> None:
    recv = await Receiver().start()
    try:
        rid = (await api.create_receiver(recv.url("traced"), id=OPTED_IN, event_types=["traced.*"]))["id"]
        headers = {"Authorization": f"Bearer {TOKEN}", "traceparent": f"00-{TRACE}-{CALLER_SPAN}-01"}
        body = {"receiver_id": rid, "event_type": "traced.one", "payload": {}}
        async with aiohttp.ClientSession() as session, session.post(
            worker.url + "/v1/messages", json=body, headers=headers
        ) as response:
            assert response.status == 202, await response.text()
            sent = await response.json()
        await wait_until(lambda: len(recv.completed) == 1, 30, "the delivery")
        await wait_until(lambda: bool(delivery_of(worker, sent["id"])), 10, "its delivery span")
    finally:
        await recv.stop()
    intake = [s for s in spans(worker) if s["name"] == "POST /v1/messages" and trace_of(s) == TRACE]
    assert len(intake) == 1 and parent_of(intake[0]) == CALLER_SPAN, intake
    assert intake[0]["kind"] == "SpanKind.SERVER"
    assert intake[0]["attributes"]["http.response.status_code"] == 202
    deliver = delivery_of(worker, sent["id"])[0]
    assert trace_of(deliver) == TRACE and parent_of(deliver) == span_id(intake[0]), "joined across Kafka"
    attrs = deliver["attributes"]
    assert (attrs["webhook.receiver_id"], attrs["webhook.seq"], attrs["webhook.attempt"]) == (rid, 1, 1)
    assert attrs["http.response.status_code"] == 200 and attrs["webhook.outcome"] == "success"
    assert deliver["resource"]["attributes"]["service.name"] == "dispatcher-under-test"
    assert recv.completed[0].headers["traceparent"] == f"00-{TRACE}-{span_id(deliver)}-01", "opted in"


async def test_a_producers_own_traceparent_is_the_parent(
    worker: WorkerProcess, api: Api, broker: EmbeddedBroker
) -> None:
    recv = await Receiver().start()
    try:
        rid = (await api.create_receiver(recv.url("direct"), event_types=["direct.*"]))["id"]
        producer = AIOKafkaProducer(bootstrap_servers=broker.url.removeprefix("kafka://"), acks="all")
        await producer.start()
        try:
            record = b'{"kind": "message", "id": "traced-direct", "event_type": "direct.x", "payload": 1}'
            header = f"00-{PRODUCER_TRACE}-{PRODUCER_SPAN}-01".encode()
            await producer.send_and_wait(f"{worker.app_id}.requests", record, key=rid.encode(),
                                         headers=[("traceparent", header)])
        finally:
            await producer.stop()
        await wait_until(lambda: bool(delivery_of(worker, "traced-direct")), 30, "its delivery span")
    finally:
        await recv.stop()
    assert "traceparent" not in recv.completed[0].headers, "not opted in"
    deliver = delivery_of(worker, "traced-direct")[0]
    assert (trace_of(deliver), parent_of(deliver)) == (PRODUCER_TRACE, PRODUCER_SPAN)


async def test_an_events_copies_are_delivered_in_the_fanout_spans_trace(
    worker: WorkerProcess, api: Api
) -> None:
    recv = await Receiver().start()
    try:
        await api.create_receiver(recv.url("fanned"), event_types=["fanned.*"])
        status, sent = await api.call("POST", "/v1/events", {"event_type": "fanned.out", "payload": {}})
        assert status == 202, sent
        await wait_until(lambda: len(recv.completed) == 1, 30, "the copy's delivery")
        copy_id = recv.completed[0].msg_id
        await wait_until(lambda: bool(delivery_of(worker, copy_id)), 10, "its delivery span")
    finally:
        await recv.stop()
    intake = next(s for s in spans(worker) if s["name"] == "POST /v1/events")
    fanout = next(s for s in spans(worker)
                  if s["name"] == "webhook.fanout" and trace_of(s) == trace_of(intake))
    deliver = delivery_of(worker, copy_id)[0]
    assert parent_of(fanout) == span_id(intake) and fanout["attributes"]["webhook.copies"] == 1
    assert trace_of(deliver) == trace_of(intake) and parent_of(deliver) == span_id(fanout)
