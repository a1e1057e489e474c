"""The send calls are bounded: a batch in messages and bytes, a payload by DISPATCHER_MAX_PAYLOAD (the
encoded payload alone), a whole record by what a worker may store; each refusal names the field at fault."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from dispatcher.domain.errors import InvalidInput
from dispatcher.domain.tokens import ADMIN
from dispatcher.settings import Settings
from dispatcher.web_port import web_settings
from web import api
from web.engine import ENGINE
from web.middleware import errors_middleware
from web.scopes import PRINCIPAL

KIB = 1024


def test_the_byte_cap_is_32_full_messages_within_the_body_cap() -> None:
    assert api.batch_byte_cap(32 << 20, 256 * KIB) == 8 << 20, "the defaults: 8 MiB"
    assert api.batch_byte_cap(1 << 20, 256 * KIB) == 1 << 20, "never over DISPATCHER_MAX_REQUEST_BODY"
    assert api.batch_byte_cap(32 << 20, 4 * KIB) == 128 * KIB


@pytest.mark.parametrize("body", [None, [], {"messages": {}}, {"messages": "x"}, {"other": []}])
def test_a_batch_needs_a_list_of_messages(body: Any) -> None:
    with pytest.raises(InvalidInput) as info:
        api.batch_items(body, 1000)
    assert info.value.field == "messages"


@pytest.mark.parametrize("count", [0, 1001, 100_000])
def test_a_batch_holds_1_to_the_limit(count: int) -> None:
    with pytest.raises(InvalidInput, match=r"1\.\.1000 messages") as info:
        api.batch_items({"messages": [{}] * count}, 1000)
    assert (info.value.field, info.value.status) == ("messages", 422)
    assert len(api.batch_items({"messages": [{}] * 1000}, 1000)) == 1000


def test_the_byte_check_names_the_field_that_crossed_the_cap() -> None:
    assert api.check_batch_bytes(100, 100, "messages") == 100
    with pytest.raises(InvalidInput) as info:
        api.check_batch_bytes(101, 100, "messages[7].payload")
    assert (info.value.field, info.value.code, info.value.status) == ("messages[7].payload", "too_large", 413)
    assert "101" in info.value.message and "100" in info.value.message


# the handler, with a dispatcher that owns no receiver (so none is looked up) ----------------------


class Owner:
    """The parts of the engine that the send calls touch."""

    def __init__(self, settings: Settings) -> None:
        self.settings = web_settings(settings, settings.policy())
        self.produced: list[tuple[str, bytes]] = []

    def is_local(self, receiver_id: str) -> bool:
        return False  # the owner elsewhere checks the receiver

    async def produce_requests(self, records: list[tuple[str, bytes]]) -> None:
        self.produced += records

    async def count_subscribers(
        self, event_type: str, tenant: str | None, wait: float, payload: Any = None, own_only: bool = False
    ) -> int:
        return 0

    async def produce_event(self, event_id: str, record: bytes) -> None:
        self.produced.append((event_id, record))


@web.middleware
async def as_admin(request: web.Request, handler: Any) -> web.StreamResponse:
    """What the auth middleware sets for a call with the admin token (test_api_auth.py tests it)."""
    request[PRINCIPAL] = ADMIN
    return await handler(request)


@asynccontextmanager
async def serving(settings: Settings) -> AsyncIterator[tuple[TestClient, Owner]]:
    owner = Owner(settings)
    app = web.Application(middlewares=[errors_middleware, as_admin], client_max_size=1 << 20)
    app[ENGINE] = owner  # type: ignore[assignment]
    app.router.add_post("/v1/messages/batch", api.send_batch)
    app.router.add_post("/v1/messages", api.send_message)
    app.router.add_post("/v1/events", api.send_event)
    client = TestClient(TestServer(app))
    await client.start_server()
    try:
        yield client, owner
    finally:
        await client.close()


@pytest.fixture
async def small() -> AsyncIterator[tuple[TestClient, Owner]]:
    """max_payload 2 KiB: a batch carries at most 64 KiB."""
    async with serving(Settings(max_payload=2 * KIB, max_request_body=1 << 20)) as served:
        yield served


def msg(n: int, payload: Any = 0) -> dict[str, Any]:
    return {"receiver_id": "r", "event_type": "t", "payload": payload, "id": f"m{n}"}


async def post(client: TestClient, data: bytes, **kw: Any) -> tuple[int, dict[str, Any]]:
    resp = await client.post("/v1/messages/batch", data=data, **kw)
    return resp.status, await resp.json()


async def test_a_body_over_the_cap_is_refused_before_it_is_parsed(small: tuple[TestClient, Owner]) -> None:
    client, owner = small
    status, answer = await post(client, b"[" + b"{}," * 30_000 + b"{}]")  # 90 KB: never parsed
    assert (status, answer["error"]["field"], answer["error"]["code"]) == (413, "messages", "too_large")

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: measured once read
        for _ in range(30):
            yield b" " * 3000
        yield orjson.dumps({"messages": [msg(0)]})

    status, answer = await post(client, chunks())  # type: ignore[arg-type]
    assert (status, answer["error"]["field"]) == (413, "messages")
    assert owner.produced == []


async def test_records_over_the_cap_name_the_message_that_crossed_it(small: tuple[TestClient, Owner]) -> None:
    """Encoding adds an id, a time and field names: 1,000 tiny messages fit as JSON, not as records."""
    client, owner = small
    raw = orjson.dumps({"messages": [msg(n) for n in range(1000)]})
    assert len(raw) < 64 * KIB
    status, answer = await post(client, raw)
    assert (status, answer["error"]["code"]) == (413, "too_large")
    assert answer["error"]["field"].startswith("messages[") and answer["error"]["field"].endswith("].payload")
    assert 300 < int(answer["error"]["field"][9:-9]) < 1000
    assert owner.produced == [], "all or none"


async def test_one_message_over_the_payload_cap_is_named(small: tuple[TestClient, Owner]) -> None:
    client, owner = small
    status, answer = await post(client, orjson.dumps({"messages": [msg(0), msg(1, "x" * 3000)]}))
    assert (status, answer["error"]["field"]) == (413, "messages[1].payload")
    assert owner.produced == []


async def test_a_batch_within_every_bound_is_sent_whole(small: tuple[TestClient, Owner]) -> None:
    client, owner = small
    status, answer = await post(client, orjson.dumps({"messages": [msg(n, "x" * 1500) for n in range(30)]}))
    assert (status, answer["ids"]) == (202, [f"m{n}" for n in range(30)])
    assert len(owner.produced) == 30


async def test_invalid_json_and_an_empty_body_are_400s(small: tuple[TestClient, Owner]) -> None:
    client, _ = small
    assert (await post(client, b"{nope"))[0] == 400
    status, answer = await post(client, b"")
    assert (status, answer["error"]["field"]) == (400, "body")


# DISPATCHER_MAX_PAYLOAD counts the encoded payload; the whole record has its own guard ------------

BULKY = {"event_type": "t." + "e" * 250, "headers": {"X-Pad": "h" * 600}}  # ~900 bytes beside the payload
CALLS = [  # (path, body for one payload, the field a payload over the cap is named by, the record's)
    ("/v1/messages", lambda p: {"receiver_id": "r", "payload": p, **BULKY}, "payload", "body"),
    ("/v1/messages/batch", lambda p: {"messages": [msg(0), {"receiver_id": "r", "payload": p, **BULKY}]},
     "messages[1].payload", "messages[1]"),
    ("/v1/events", lambda p: {"event_type": BULKY["event_type"], "payload": p}, "payload", "body"),
]


def payload_of(size: int) -> str:
    """A payload that is `size` bytes as JSON (a string: its quotes count)."""
    return "x" * (size - 2)


@pytest.mark.parametrize(("path", "body", "payload_field", "record_field"), CALLS, ids=[c[0] for c in CALLS])
async def test_the_payload_cap_counts_the_encoded_payload_alone(
    small: tuple[TestClient, Owner], path: str, body: Any, payload_field: str, record_field: str
) -> None:
    client, owner = small
    resp = await client.post(path, data=orjson.dumps(body(payload_of(2 * KIB))))
    assert resp.status == 202, await resp.json()
    assert len(owner.produced[-1][1]) > 2 * KIB + 200, "the record is over the cap: only the payload counts"
    resp = await client.post(path, data=orjson.dumps(body(payload_of(2 * KIB + 1))))
    error = (await resp.json())["error"]
    assert (resp.status, error["code"], error["field"]) == (413, "too_large", payload_field)
    assert f"{2 * KIB + 1} bytes" in error["message"]


@pytest.mark.parametrize(("path", "body", "payload_field", "record_field"), CALLS, ids=[c[0] for c in CALLS])
async def test_a_record_too_large_to_store_is_refused_naming_the_message(
    path: str, body: Any, payload_field: str, record_field: str
) -> None:
    """A payload within its cap whose record would not fit DISPATCHER_MAX_RECORD_BYTES (less framing)."""
    settings = Settings(max_payload=8 * KIB, max_request_body=1 << 20, max_record_bytes=4096 + 4 * KIB)
    async with serving(settings) as (client, owner):
        resp = await client.post(path, data=orjson.dumps(body(payload_of(2 * KIB))))
        assert resp.status == 202, await resp.json()
        sent = len(owner.produced)
        resp = await client.post(path, data=orjson.dumps(body(payload_of(4 * KIB))))
        error = (await resp.json())["error"]
        assert (resp.status, error["code"], error["field"]) == (413, "too_large", record_field)
        assert len(owner.produced) == sent, "nothing of the refused call was sent"
