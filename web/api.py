"""The /v1 JSON API: receivers and messages."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web

from dispatcher.domain.actor import ReceiverState
from dispatcher.domain.errors import InvalidInput
from dispatcher.domain.ids import check_id, new_id
from dispatcher.domain.records import (
    Message,
    encode_message_record,
    encode_upsert_record,
    parse_message_spec,
    parse_receiver_spec,
)
from dispatcher.domain.signing import generate_secret

from .routing import forward_to_owner

if TYPE_CHECKING:
    from dispatcher.worker import Dispatcher


def _dispatcher(request: web.Request) -> Dispatcher:
    from .app import DISPATCHER

    return request.app[DISPATCHER]


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(data), content_type="application/json")


async def read_json(request: web.Request) -> Any:
    raw = await request.read()
    if not raw:
        raise InvalidInput("body", "a JSON body is required", code="invalid_json", status=400)
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidInput("body", f"invalid JSON: {exc}", code="invalid_json", status=400) from exc


async def create_receiver(request: web.Request) -> web.StreamResponse:
    """Create (or replace) a receiver; answers once its owner has applied it.

    Waiting for the owner makes a message sent right after the 201 find its
    receiver, on whichever worker it lands.
    """
    dispatcher = _dispatcher(request)
    body = await read_json(request)
    rid = check_id(body["id"], "id") if isinstance(body, dict) and "id" in body else new_id("rcv")
    config = parse_receiver_spec(
        body, rid, generate_secret(), time.time(), dispatcher.settings.require_https
    )
    await dispatcher.guard.check_url(config.url)
    if not dispatcher.is_local(rid):
        return await forward_to_owner(dispatcher, request, rid, {**body, "id": rid, "secret": config.secret})
    await dispatcher.produce_requests([(rid, encode_upsert_record(config))])
    await wait_applied(dispatcher, rid, lambda state: state.config == config, "id")
    return _json(config.as_dict(), status=201)


async def wait_applied(
    dispatcher: Dispatcher,
    receiver_id: str,
    done: Callable[[ReceiverState], bool],
    field: str = "receiver_id",
    limit: float = 10.0,
) -> ReceiverState:
    """Wait until the owner's stream has applied a record the API produced (read your write)."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        state = dispatcher.store.load(receiver_id)
        if state is not None and done(state):
            return state
        await asyncio.sleep(0.005)
    raise InvalidInput(field, "accepted but not yet applied; read the receiver again", "pending", 504)


async def send_message(request: web.Request) -> web.Response:
    dispatcher = _dispatcher(request)
    msg = parse_message_spec(await read_json(request), "", _new_msg_id, time.time())
    _check_known(dispatcher, msg.receiver_id, "receiver_id")
    record = _encode_checked(dispatcher, msg, "payload")
    await dispatcher.produce_requests([(msg.receiver_id, record)])
    return _json({"id": msg.id, "receiver_id": msg.receiver_id}, status=202)


async def send_batch(request: web.Request) -> web.Response:
    """Validate every message first: one bad message rejects the batch, none is sent."""
    dispatcher = _dispatcher(request)
    body = await read_json(request)
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        raise InvalidInput("messages", "must be a list of messages")
    items = body["messages"]
    if not 1 <= len(items) <= dispatcher.settings.max_batch:
        raise InvalidInput("messages", f"must hold 1..{dispatcher.settings.max_batch} messages")
    now = time.time()
    records = []
    ids = []
    for i, item in enumerate(items):
        msg = parse_message_spec(item, f"messages[{i}].", _new_msg_id, now)
        _check_known(dispatcher, msg.receiver_id, f"messages[{i}].receiver_id")
        records.append((msg.receiver_id, _encode_checked(dispatcher, msg, f"messages[{i}].payload")))
        ids.append(msg.id)
    await dispatcher.produce_requests(records)
    return _json({"ids": ids}, status=202)


def _new_msg_id() -> str:
    return new_id("msg")


def _encode_checked(dispatcher: Dispatcher, msg: Message, field: str) -> bytes:
    record = encode_message_record(msg)
    if len(record) > dispatcher.settings.max_payload:
        raise InvalidInput(
            field, f"message larger than {dispatcher.settings.max_payload} bytes", "too_large", 413
        )
    return record


def _check_known(dispatcher: Dispatcher, receiver_id: str, field: str) -> None:
    """Reject unknown receivers where this worker can tell; the owner dead-letters the rest."""
    if dispatcher.is_local(receiver_id) and dispatcher.store.load(receiver_id) is None:
        raise InvalidInput(field, f"no receiver {receiver_id!r}", code="not_found", status=404)
