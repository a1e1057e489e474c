"""Events fan out to every subscribed receiver, once each, by type pattern and tenant."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaProducer

from dispatcher.broker import EmbeddedBroker
from dispatcher.domain.events import copy_id
from tests.harness import Api, Receiver, WorkerProcess, first_copies, wait_until, wait_until_read

SUBSCRIBERS = 2000


async def subscriptions_known(worker: WorkerProcess) -> int:
    return (await worker.readyz())["subscriptions"]["receivers"]


async def until_known(worker: WorkerProcess, at_least: int) -> None:
    await wait_until_read(lambda: subscriptions_known(worker), lambda n: n >= at_least, 60, "subscriptions")


async def create_many(api: Api, specs: list[dict[str, Any]]) -> None:
    for start in range(0, len(specs), 25):
        await asyncio.gather(*(api.create_receiver(**spec) for spec in specs[start : start + 25]))


def fanned_out(worker: WorkerProcess, event_id: str) -> int:
    return worker.log_path.read_text().count(f"event_id={event_id} ")


async def publish(api: Api, **event: Any) -> dict[str, Any]:
    status, body = await api.call("POST", "/v1/events", event)
    assert status == 202, body
    return body


async def test_one_event_reaches_2000_subscribers_once_even_when_published_twice(
    worker: WorkerProcess, api: Api
) -> None:
    server = await Receiver().start()
    try:
        specs = [{"url": server.url(f"s{i}"), "id": f"sub{i}", "event_types": ["payment.succeeded"]}
                 for i in range(SUBSCRIBERS)]
        await create_many(api, specs)
        await until_known(worker, SUBSCRIBERS)

        answer = await publish(api, event_type="payment.succeeded", payload={"amount": 5}, id="evt-a")
        assert answer == {"id": "evt-a", "event_type": "payment.succeeded", "receivers": SUBSCRIBERS}
        await wait_until(lambda: len(first_copies(server.completed)) == SUBSCRIBERS, 120, "2,000 deliveries")
        paths = sorted(d.path for d in first_copies(server.deliveries))
        assert paths == sorted(f"s{i}" for i in range(SUBSCRIBERS))
        assert all(d.msg_id == copy_id("evt-a", f"sub{d.path[1:]}") for d in server.deliveries)

        # The same event again (a producer retrying): fanned out, but no receiver gets a second copy.
        await publish(api, event_type="payment.succeeded", payload={"amount": 5}, id="evt-a")
        await wait_until(lambda: fanned_out(worker, "evt-a") == 2, 60, "the second fan-out")
        await publish(api, event_type="payment.succeeded", payload={"amount": 6}, id="evt-b")
        await wait_until(lambda: len(first_copies(server.completed)) == 2 * SUBSCRIBERS, 120, "evt-b")
        for i in range(0, SUBSCRIBERS, 97):
            mine = first_copies(server.by_path(f"s{i}"))
            assert [(d.msg_id, d.seq) for d in mine] == [
                (copy_id("evt-a", f"sub{i}"), 1), (copy_id("evt-b", f"sub{i}"), 2)
            ], "the replayed copy took no seq"
    finally:
        await server.stop()


EVENTS: list[tuple[str, str | None]] = [
    ("shop.order.paid", None),  # 0
    ("shop.order.paid", "acme"),  # 1
    ("shop.refund", None),  # 2
    ("crm.lead", None),  # 3
    ("shop.order.paid", "globex"),  # 4
]
PATTERN_TABLE: list[tuple[str, list[str], str | None, set[int]]] = [
    # receiver, event_types, tenant, the EVENTS it gets
    ("exact", ["shop.order.paid"], None, {0, 1, 4}),
    ("tail", ["shop.*"], None, {0, 1, 2, 4}),
    ("middle", ["shop.*.paid"], None, {0, 1, 4}),
    ("everything", ["*"], None, {0, 1, 2, 3, 4}),
    ("acme", ["shop.*"], "acme", {1}),
    ("two", ["crm.lead", "shop.refund"], None, {2, 3}),
]


async def test_patterns_and_tenants_pick_the_receivers(worker: WorkerProcess, api: Api) -> None:
    server = await Receiver().start()
    try:
        before = await subscriptions_known(worker)
        for name, types, tenant, _ in PATTERN_TABLE:
            spec: dict[str, Any] = {"url": server.url(name), "id": f"pt-{name}", "event_types": types}
            if tenant:
                spec["tenant"] = tenant
            made = await api.create_receiver(**spec)
            assert made["tenant"] == tenant and made["event_types"] == types
        await until_known(worker, before + len(PATTERN_TABLE))
        # Types and tenants of their own: the other test's subscribers listen to payment.succeeded only.
        for n, (event_type, tenant) in enumerate(EVENTS):
            event: dict[str, Any] = {"event_type": event_type, "payload": {"n": n}, "id": f"pt-e{n}"}
            if tenant:
                event["tenant"] = tenant
            answer = await publish(api, **event)
            assert answer["receivers"] == sum(n in gets for *_, gets in PATTERN_TABLE), (event_type, tenant)
        total = sum(len(gets) for *_, gets in PATTERN_TABLE)
        await wait_until(lambda: len(first_copies(server.completed)) == total, 60, "every copy")
        for name, _, _, gets in PATTERN_TABLE:
            got = {orjson.loads(d.body)["data"]["n"] for d in first_copies(server.by_path(name))}
            assert got == gets, name
    finally:
        await server.stop()


async def test_one_event_id_from_two_tenants_reaches_an_untenanted_receiver_twice(
    worker: WorkerProcess, api: Api
) -> None:
    """Every tenant's events reach untenanted receivers, so an event id is the tenant's own: one a
    tenant published first must not make another tenant's (or an untenanted) event of that id a
    duplicate there, nor carry its payload in the other's place."""
    server = await Receiver().start()
    try:
        before = await subscriptions_known(worker)
        await api.create_receiver(url=server.url("shared"), id="tid-shared", event_types=["tid.paid"])
        await api.create_receiver(url=server.url("acme"), id="tid-acme", event_types=["tid.paid"],
                                  tenant="acme")
        await until_known(worker, before + 2)
        publishers: list[str | None] = ["acme", "globex", None]
        for tenant in publishers:
            event: dict[str, Any] = {"event_type": "tid.paid", "payload": {"from": str(tenant)},
                                     "id": "inv-1"}
            if tenant:
                event["tenant"] = tenant
            await publish(api, **event)
        # acme's again (a retry): fanned out, no copy delivered
        await publish(api, event_type="tid.paid", payload={"from": "acme"}, id="inv-1", tenant="acme")
        await wait_until(lambda: fanned_out(worker, "inv-1") == 4, 60, "four fan-outs")
        await publish(api, event_type="tid.paid", payload={"from": "last"}, id="inv-2")
        await wait_until(lambda: len(first_copies(server.by_path("shared"))) == 4, 60, "every copy")
        await wait_until(lambda: bool(server.by_path("acme")), 60, "the tenant's copy")

        shared = first_copies(server.by_path("shared"))
        assert [orjson.loads(d.body)["data"]["from"] for d in shared] == ["acme", "globex", "None", "last"]
        assert [d.msg_id for d in shared[:3]] == [copy_id("inv-1", "tid-shared", t) for t in publishers]
        assert [d.seq for d in shared] == [1, 2, 3, 4], "the retry took no seq"
        # The untenanted copy keeps the id it always had; a tenant's receiver gets its tenant's only.
        assert shared[2].msg_id == copy_id("inv-1", "tid-shared")
        acme = first_copies(server.by_path("acme"))
        assert [(orjson.loads(d.body)["data"]["from"], d.seq) for d in acme] == [("acme", 1)]
    finally:
        await server.stop()


async def test_an_event_published_right_after_a_create_or_delete_sees_it(
    worker: WorkerProcess, broker: EmbeddedBroker, api: Api
) -> None:
    """Read your writes: once `POST /v1/receivers` answered, the next event reaches the receiver,
    whether published through the API or straight to the events topic; once `DELETE` answered,
    the next event does not fan out to it."""
    server = await Receiver().start()
    producer = AIOKafkaProducer(bootstrap_servers=broker.url.removeprefix("kafka://"), acks="all")
    await producer.start()
    try:
        others = (await publish(api, event_type="ryw.none", payload={}))["receivers"]  # the catch-alls
        rounds = 16
        for n in range(rounds):
            await api.create_receiver(url=server.url(f"ryw{n}"), id=f"ryw-{n}", event_types=[f"ryw.t{n}"])
            event = {"event_type": f"ryw.t{n}", "payload": {"n": n}, "id": f"ryw-e{n}"}
            if n % 2:  # the fan-out agent's own sync, not the API's, is what finds the receiver
                await producer.send_and_wait(f"{worker.app_id}.events", orjson.dumps(event))
            else:
                assert (await publish(api, **event))["receivers"] == others + 1
        await wait_until(lambda: len(first_copies(server.completed)) == rounds, 60, "one copy per receiver")
        got = sorted((d.path, d.msg_id) for d in first_copies(server.completed))
        assert got == sorted((f"ryw{n}", copy_id(f"ryw-e{n}", f"ryw-{n}")) for n in range(rounds))

        status, body = await api.call("DELETE", "/v1/receivers/ryw-0")
        assert status == 200, body
        answer = await publish(api, event_type="ryw.t0", payload={}, id="ryw-after-delete")
        assert answer["receivers"] == others, answer
    finally:
        await producer.stop()
        await server.stop()


async def test_bad_events_name_their_field(api: Api) -> None:
    for body, field in [
        ({"payload": {}}, "event_type"),
        ({"event_type": "a.*", "payload": {}}, "event_type"),
        ({"event_type": "a.b"}, "payload"),
        ({"event_type": "a.b", "payload": {}, "tenant": "bad tenant"}, "tenant"),
        ({"event_type": "a.b", "payload": {}, "id": "no spaces"}, "id"),
        ({"event_type": "a.b", "payload": {}, "extra": 1}, "extra"),
    ]:
        status, answer = await api.call("POST", "/v1/events", body)
        assert status == 422 and answer["error"]["field"] == field, (body, answer)


@pytest.mark.parametrize("types", [["payment..x"], ["pay ment"], "payment.*"])
async def test_bad_subscriptions_name_their_field(api: Api, types: Any) -> None:
    body = {"url": "http://127.0.0.1:9/", "event_types": types}
    status, answer = await api.call("POST", "/v1/receivers", body)
    assert status == 422 and answer["error"]["field"].startswith("event_types"), answer
