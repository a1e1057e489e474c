"""Content filters on the embedded broker: fan-out by payload, and a direct message filtered (no seq)."""

from __future__ import annotations

import re
from typing import Any

import aiohttp
import orjson

from tests.harness import Api, Receiver, WorkerProcess, first_copies, wait_until, wait_until_read
from tests.integration.test_ui_owner import logged_in

FILTERS: list[tuple[str, dict[str, Any] | None, set[int]]] = [
    # receiver, its filter, the EVENTS (by n) it gets
    ("all", None, {0, 1, 2, 3}),
    ("big", {"payload": {"amount": {"$gte": 100}}}, {1, 3}),
    ("eur", {"payload.currency": "EUR"}, {0, 1}),
    ("vip-or-big", {"$or": [{"payload.tags": "vip"}, {"payload.amount": {"$gt": 500}}]}, {2, 3}),
    ("not-usd", {"$not": {"payload": {"currency": {"$regex": "^US"}}}}, {0, 1}),
]
EVENTS: list[dict[str, Any]] = [
    {"amount": 10, "currency": "EUR", "tags": []},
    {"amount": 250, "currency": "EUR", "tags": ["new"]},
    {"amount": 5, "currency": "USD", "tags": ["vip"]},
    {"amount": 900, "currency": "USD", "tags": []},
]


async def filtered_total(worker: WorkerProcess, at: str) -> float:
    async with aiohttp.ClientSession() as session, session.get(f"{worker.url}/metrics") as response:
        text = await response.text()
    found = re.search(rf'^webhook_dispatcher_messages_filtered_total{{at="{at}"}} (\S+)$', text, re.MULTILINE)
    assert found, text[:300]
    return float(found.group(1))


async def test_events_fan_out_to_the_receivers_whose_filter_takes_them(
    worker: WorkerProcess, api: Api
) -> None:
    server = await Receiver().start()
    refused_before = await filtered_total(worker, "fanout")
    try:
        for name, content_filter, _ in FILTERS:
            spec: dict[str, Any] = {"url": server.url(name), "id": f"f-{name}", "event_types": ["flt.order"]}
            if content_filter is not None:
                spec["filter"] = content_filter
            made = await api.create_receiver(**spec)
            assert made["filter"] == content_filter
        await wait_until_read(lambda: _known(worker), lambda n: n >= len(FILTERS), 60, "subscriptions")
        for n, payload in enumerate(EVENTS):
            status, answer = await api.call("POST", "/v1/events",
                                            {"event_type": "flt.order", "payload": {"n": n, **payload}})
            assert status == 202, answer
            assert answer["receivers"] == sum(n in gets for *_, gets in FILTERS), (n, answer)
        total = sum(len(gets) for *_, gets in FILTERS)
        await wait_until(lambda: len(first_copies(server.completed)) == total, 60, "every copy")
        for name, _, gets in FILTERS:
            mine = first_copies(server.by_path(name))
            assert {orjson.loads(d.body)["data"]["n"] for d in mine} == gets, name
            assert sorted(d.seq for d in mine) == list(range(1, len(gets) + 1)), "seqs without gaps"

        # A PATCH changes the filter; fan-out follows it.
        status, body = await api.call("PATCH", "/v1/receivers/f-big", {"filter": {"payload.amount": 1}})
        assert status == 200 and body["filter"] == {"payload.amount": 1}, body
        payload = {"n": 9, "amount": 1, "currency": "USD"}
        status, answer = await api.call("POST", "/v1/events", {"event_type": "flt.order", "payload": payload})
        assert answer["receivers"] == 2, answer  # all, big
        await wait_until(lambda: len(first_copies(server.completed)) == total + 2, 60, "the patched copy")
        refused = len(EVENTS) * len(FILTERS) - total + len(FILTERS) - 2
        assert await filtered_total(worker, "fanout") == refused_before + refused
    finally:
        await server.stop()


async def _known(worker: WorkerProcess) -> int:
    return int((await worker.readyz())["subscriptions"]["receivers"])


async def test_a_direct_message_the_filter_refuses_reads_filtered_and_takes_no_seq(
    worker: WorkerProcess, api: Api
) -> None:
    server = await Receiver().start()
    refused_before = await filtered_total(worker, "intake")
    try:
        await api.create_receiver(url=server.url("d"), id="f-direct",
                                  filter={"headers": {"x-region": "eu"}, "payload": {"ok": True}})

        async def send(msg_id: str, ok: bool, region: str) -> None:
            body = {"receiver_id": "f-direct", "event_type": "d.x", "id": msg_id, "payload": {"ok": ok},
                    "headers": {"X-Region": region}}
            status, answer = await api.call("POST", "/v1/messages", body)
            assert status == 202, answer

        await send("d1", True, "eu")
        await send("d2", False, "eu")  # refused: payload
        await send("d3", True, "us")  # refused: header
        await send("d4", True, "eu")
        await send("d2", True, "eu")  # the same id again: a duplicate of a filtered message
        await wait_until(lambda: len(first_copies(server.completed)) == 2, 60, "the two kept messages")
        got = [(d.msg_id, d.seq) for d in first_copies(server.completed)]
        assert got == [("d1", 1), ("d4", 2)], "the next message got the next seq: no gap"
        for msg_id, status_word, seq in [("d1", "delivered", 1), ("d2", "filtered", None),
                                         ("d3", "filtered", None), ("d4", "delivered", 2)]:
            status, answer = await api.call("GET", f"/v1/receivers/f-direct/messages/{msg_id}")
            assert status == 200 and (answer["status"], answer["seq"]) == (status_word, seq), answer
        state = await api.state("f-direct")
        assert state["next_seq"] == 3, state
        assert await filtered_total(worker, "intake") == refused_before + 2, "d2 and d3, once each"
        session = await logged_in(worker)
        async with session, session.get(worker.url + "/ui/receivers/f-direct/messages/d2") as page:
            html = await page.text()
            assert page.status == 200 and ">filtered<" in html and "filter refused it" in html, html[:500]
    finally:
        await server.stop()


async def test_a_bad_filter_is_refused_naming_its_path(api: Api) -> None:
    for content_filter, field in [
        ({"payload": {"amount": {"$gte": "ten", "$in": 5}}}, "filter.payload.amount.$in"),
        ({"data": {"amount": 1}}, "filter.data"),
        ({"payload": {"s": {"$regex": "(?<=a)b"}}}, "filter.payload.s.$regex"),
        ("payload.amount > 1", "filter"),
    ]:
        status, answer = await api.call("POST", "/v1/receivers",
                                        {"url": "http://127.0.0.1:9/", "filter": content_filter})
        assert status == 422 and answer["error"]["field"] == field, answer
        assert answer["error"]["code"] == "invalid"
