"""The /v1 JSON API: receivers and messages."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import orjson
from aiohttp import web

from dispatcher.domain.actor import ReceiverState, refuses_new
from dispatcher.domain.errors import InvalidInput
from dispatcher.domain.events import encode_event, parse_event_spec
from dispatcher.domain.ids import check_id, new_id
from dispatcher.domain.receiver_auth import OAuth2Auth
from dispatcher.domain.receiver_spec import parse_receiver_spec, patched_body, public_view, secret_view
from dispatcher.domain.records import (
    Message,
    ReceiverConfig,
    encode_message_record,
    encode_upsert_record,
    parse_message_spec,
)
from dispatcher.domain.signing import generate
from dispatcher.domain.tokens import Principal, may_see, scoped_event_body, scoped_receiver_body

from .engine import ENGINE, Engine, WebSettings
from .routing import forward_to_owner
from .scopes import check_target, check_visible, not_found, principal_of

COUNT_SYNC_WAIT = 5.0  # s an event's answer may wait for the subscriptions to be read up to now


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(data), content_type="application/json")


async def read_json(request: web.Request, required: bool = True) -> Any:
    raw = await request.read()
    if not raw:
        if not required:
            return None
        raise InvalidInput("body", "a JSON body is required", code="invalid_json", status=400)
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidInput("body", f"invalid JSON: {exc}", code="invalid_json", status=400) from exc


async def create_receiver(request: web.Request) -> web.StreamResponse:
    """Create (201) or replace (200) a receiver, on its owner; answers once the owner applied it.

    The URL passes the target guard first, and the verification handshake when
    the receiver asks for one. A replace keeps the secrets unless given new ones.
    A tenant token's receiver is its tenant's; it cannot replace another tenant's.
    """
    engine = request.app[ENGINE]
    principal = principal_of(request)
    body = scoped_receiver_body(principal, await read_json(request), create=True)
    if not isinstance(body, dict):
        raise InvalidInput("body", "must be a JSON object")
    rid = check_id(body["id"], "id") if "id" in body else new_id("rcv")
    if not engine.is_local(rid):
        return await forward_to_owner(engine, request, rid, {**body, "id": rid})
    state = engine.receiver_state(rid)
    if state is None and not engine.ready():  # it may exist on the partition's next owner
        raise InvalidInput("id", "the owner of this id is moving (rebalance); retry", "unavailable", 503)
    if state is not None and not may_see(principal, state.config.tenant):
        raise InvalidInput("id", "is taken: choose another id, or leave it out", "conflict", 409)
    if state is not None and state.purging:  # the actor ignores a configure until that is done
        raise InvalidInput("id", "is being deleted or reset; try again once that is done", "conflict", 409)
    return await apply_spec(engine, rid, body, state.config if state is not None else None)


async def patch_receiver(request: web.Request) -> web.StreamResponse:
    """Change only the fields the body names (on the owner); answers once the owner applied it."""
    engine = request.app[ENGINE]
    principal = principal_of(request)
    rid = check_id(request.match_info["receiver_id"], "receiver_id")
    body = scoped_receiver_body(principal, await read_json(request), create=False)
    if not engine.is_local(rid):
        return await forward_to_owner(engine, request, rid, body)
    check_visible(engine, principal, rid)
    state = engine.receiver_state(rid)
    if state is None or state.deleting:
        raise not_found(rid)
    if state.resetting:
        raise InvalidInput("receiver_id", "is being reset; try again once that is done", "conflict", 409)
    return await apply_spec(engine, rid, patched_body(state.config, body), state.config)


async def apply_spec(
    engine: Engine, rid: str, body: dict[str, Any], current: ReceiverConfig | None
) -> web.StreamResponse:
    settings = engine.settings
    now = time.time()
    config = parse_receiver_spec(
        body, rid, now, settings.require_https, generate, current, settings.verify_endpoints
    )
    await engine.check_url(config.url)
    if isinstance(config.auth, OAuth2Auth):  # token requests pass the same guard as deliveries
        await engine.check_url(config.auth.token_url, "auth.token_url")
    if config.verify and not config.verified:
        config = replace(config, verification=await engine.verify(config))
    await store_config(engine, config, create=current is None)
    if current is None or config.secret != current.secret:
        return _json(secret_view(config, now, settings.policy), status=201 if current is None else 200)
    return _json(public_view(config, now, settings.policy))


async def store_config(engine: Engine, config: ReceiverConfig, create: bool = False) -> ReceiverState:
    """Write a receiver's config through its stream and wait until the owner has applied it.

    Waiting makes a message sent right after the answer find the receiver as
    configured, on whichever worker it lands. A `create` applies only where no
    receiver has the id: of two creates that race, one gets 409, so no caller is
    shown a secret that is not the one stored.
    """
    await engine.produce_commands([(config.id, encode_upsert_record(config, if_absent=create))])
    done = (lambda state: True) if create else (lambda state: state.config == config)
    state = await wait_applied(engine, config.id, done, "id")
    if state.config != config:
        raise InvalidInput("id", "a receiver with this id exists (created meanwhile, or by an earlier try "
                           "of this request): GET it, or rotate its secret to get one", "conflict", 409)
    await wait_durable(engine, config.id, engine.last_write())
    await subscription_published(engine, config.id)  # an event published next finds it
    return state


async def wait_durable(engine: Engine, receiver_id: str, number: int, limit: float = 10.0) -> None:
    """Wait until the receiver's partition has every write up to `number` (the applied config's
    among them) in the changelog. Configuration travels apart from messages, so after a crash a
    message sent after this answer may be read again before the config record is: the successor
    must already have the config from the changelog."""
    deadline = time.monotonic() + limit
    while True:
        durable = engine.durable_through(receiver_id, number)
        if durable:
            return
        if durable is None:
            raise InvalidInput("id", "applied, but its partition is moving; read the receiver again",
                               "unavailable", 503)
        if time.monotonic() >= deadline:
            raise InvalidInput("id", "applied but not yet durable; read the receiver again", "pending", 504)
        await asyncio.sleep(0.002)


async def subscription_published(engine: Engine, receiver_id: str) -> None:
    try:
        await engine.subscription_published(receiver_id)
    except Exception as exc:
        detail = f"applied, but its subscriptions were not published ({type(exc).__name__}); send it again"
        raise InvalidInput("id", detail, "unavailable", 503) from exc


async def wait_applied(
    engine: Engine,
    receiver_id: str,
    done: Callable[[ReceiverState], bool],
    field: str = "receiver_id",
    limit: float = 10.0,
) -> ReceiverState:
    """Wait until the owner's stream has applied a record the API produced (read your write)."""
    applied, state = await poll_state(engine, receiver_id, lambda s: s is not None and done(s), limit)
    if not applied or state is None:
        raise InvalidInput(field, "accepted but not yet applied; read the receiver again", "pending", 504)
    return state


async def poll_state(
    engine: Engine,
    receiver_id: str,
    done: Callable[[ReceiverState | None], bool],
    limit: float = 10.0,
) -> tuple[bool, ReceiverState | None]:
    """Read the receiver's state (None: gone) until `done` holds, for `limit` seconds: (held, last read)."""
    deadline = time.monotonic() + limit
    while True:
        state = engine.receiver_state(receiver_id)
        if done(state):
            return True, state
        if time.monotonic() >= deadline:
            return False, state
        await asyncio.sleep(0.005)


async def send_message(request: web.Request) -> web.Response:
    engine = request.app[ENGINE]
    return _json(await accept_message(engine, await read_json(request), principal_of(request)), status=202)


async def accept_message(engine: Engine, body: Any, principal: Principal) -> dict[str, Any]:
    """Check one message (the API's and the UI's) and produce it; its id once the broker has it."""
    msg = parse_message_spec(body, "", _new_msg_id, time.time())
    await check_target(engine, principal, msg.receiver_id, "receiver_id")
    _check_known(engine, msg.receiver_id, "receiver_id")
    record = _encode_checked(engine, msg, "")
    await engine.produce_requests([(msg.receiver_id, record)])
    return {"id": msg.id, "receiver_id": msg.receiver_id}


BATCH_MAX_MESSAGES = 1000  # the documented maxItems (openapi.json); DISPATCHER_MAX_BATCH may lower it
# A batch carries at most this many full-size messages' worth of bytes (8 MiB by default).
BATCH_MAX_PAYLOADS = 32


async def send_batch(request: web.Request) -> web.Response:
    """Validate every message first: one bad message rejects the batch, none is sent.

    Bounded in messages and in bytes (the body before it is parsed, the records after), each
    refusal naming the field at fault: `messages`, or `messages[i].payload`.
    """
    engine = request.app[ENGINE]
    principal = principal_of(request)
    settings = engine.settings
    cap = batch_byte_cap(settings.max_request_body, settings.max_payload)
    items = batch_items(await _read_batch(request, cap), min(settings.max_batch, BATCH_MAX_MESSAGES))
    now = time.time()
    records = []
    ids = []
    total = 0
    for i, item in enumerate(items):
        msg = parse_message_spec(item, f"messages[{i}].", _new_msg_id, now)
        await check_target(engine, principal, msg.receiver_id, f"messages[{i}].receiver_id")
        _check_known(engine, msg.receiver_id, f"messages[{i}].receiver_id")
        record = _encode_checked(engine, msg, f"messages[{i}].")
        total = check_batch_bytes(total + len(record), cap, f"messages[{i}].payload")
        records.append((msg.receiver_id, record))
        ids.append(msg.id)
    await engine.produce_requests(records)
    return _json({"ids": ids}, status=202)


def batch_byte_cap(max_request_body: int, max_payload: int) -> int:
    """The most bytes one batch may carry, as sent and as encoded for Kafka.

    The body cap alone (DISPATCHER_MAX_REQUEST_BODY, 32 MiB) is no memory bound: parsed JSON
    takes many times its size in Python objects (docs/benchmarks.md), and a batch
    is parsed whole before any message is checked. 32 full-size messages keep a batch's parse
    within a few hundred MB and leave 1,000 messages of 8 KiB each room.
    """
    return min(max_request_body, BATCH_MAX_PAYLOADS * max_payload)


async def _read_batch(request: web.Request, cap: int) -> Any:
    """The batch's JSON, refused by its size before it is parsed (or, when it says its length, read)."""
    if request.content_length is not None and request.content_length > cap:
        raise _batch_too_large(request.content_length, cap, "messages")
    raw = await request.read()  # chunked: aiohttp stops at DISPATCHER_MAX_REQUEST_BODY
    check_batch_bytes(len(raw), cap, "messages")
    if not raw:
        raise InvalidInput("body", "a JSON body is required", code="invalid_json", status=400)
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidInput("body", f"invalid JSON: {exc}", code="invalid_json", status=400) from exc


def batch_items(body: Any, limit: int) -> list[Any]:
    """The batch's `messages`: a list of 1..`limit` (checked before any message is looked at)."""
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        raise InvalidInput("messages", "must be a list of messages")
    items: list[Any] = body["messages"]
    if not 1 <= len(items) <= limit:
        raise InvalidInput("messages", f"must hold 1..{limit} messages (this one holds {len(items)})")
    return items


def check_batch_bytes(size: int, cap: int, field: str) -> int:
    """`size` if a batch of that many bytes is allowed; else a 413 naming `field`."""
    if size > cap:
        raise _batch_too_large(size, cap, field)
    return size


def _batch_too_large(size: int, cap: int, field: str) -> InvalidInput:
    return InvalidInput(
        field, f"the batch comes to {size} bytes; a batch carries at most {cap}: split it", "too_large", 413
    )


async def send_event(request: web.Request) -> web.Response:
    """Publish an event to every subscribed receiver; the count is this worker's current view."""
    engine = request.app[ENGINE]
    return _json(await publish_event(engine, await read_json(request), principal_of(request)), status=202)


async def publish_event(engine: Engine, body: Any, principal: Principal) -> dict[str, Any]:
    """Check an event (the API's and the UI's) and produce it; its id and how many receivers match
    (for a tenant token, how many of its tenant's: untenanted receivers get it too, uncounted)."""
    event = parse_event_spec(scoped_event_body(principal, body), _new_event_id, time.time())
    check_payload_size(engine.settings, event.payload, "payload")
    record = check_record_size(engine.settings, encode_event(event), "body", "event")
    receivers = await engine.count_subscribers(
        event.event_type, event.tenant, COUNT_SYNC_WAIT, event.payload, own_only=not principal.admin
    )
    await engine.produce_event(event.id, record)
    return {"id": event.id, "event_type": event.event_type, "receivers": receivers}


def _new_event_id() -> str:
    return new_id("evt")


def _new_msg_id() -> str:
    return new_id("msg")


def _encode_checked(engine: Engine, msg: Message, prefix: str) -> bytes:
    """The message's record, its payload and the whole record each within their limit (413 otherwise)."""
    check_payload_size(engine.settings, msg.payload, prefix + "payload")
    return check_record_size(engine.settings, encode_message_record(msg), prefix.rstrip(".") or "body")


def check_payload_size(settings: WebSettings, payload: Any, field: str) -> None:
    """DISPATCHER_MAX_PAYLOAD counts the payload as encoded, nothing else: the error names it alone."""
    size = len(orjson.dumps(payload))
    if size > settings.max_payload:
        why = f"is {size} bytes as JSON; a payload may have at most {settings.max_payload}"
        raise InvalidInput(field, why, "too_large", 413)


def check_record_size(settings: WebSettings, record: bytes, field: str, what: str = "message") -> bytes:
    """The whole record (payload, type, headers, ids) must fit in one the workers may produce and store
    (DISPATCHER_MAX_RECORD_BYTES less framing); refused here rather than dead-lettered as too_large later."""
    limit = settings.policy.max_entry_bytes
    if len(record) > limit:
        why = f"the {what} comes to {len(record)} bytes with its other fields; a record holds at most {limit}"
        raise InvalidInput(field, why, "too_large", 413)
    return record


def _check_known(engine: Engine, receiver_id: str, field: str) -> None:
    """Refuse unknown receivers, and full backlogs whose policy is `reject`, where this worker
    can tell (it owns the receiver); the owner dead-letters the rest, with the same reason."""
    if not engine.is_local(receiver_id):
        return
    state = engine.receiver_state(receiver_id)
    if state is None:
        raise not_found(receiver_id, field)
    if refuses_new(state, engine.settings.policy, 1):  # any message stores at least a byte
        raise InvalidInput(
            field,
            f"receiver {receiver_id!r} has a full backlog ({state.backlog} messages, "
            f"{state.backlog_bytes} bytes); retry later",
            code="backlog_full",
            status=429,
        )
