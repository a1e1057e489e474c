"""Events: what producers publish without naming receivers, and the copies fan-out makes.

An event goes to every receiver whose subscription matches its type (and
tenant). Each copy is an ordinary message whose id is derived from the event
id, its tenant and the receiver id, so fanning the same event out twice (a
replay after a crash, or a producer retrying) makes the same ids, and the
receiver's dedup drops the second copies. The tenant is in it because every
tenant's events reach the untenanted receivers: without it, a tenant that
published an id first would have another tenant's event of that id dropped
there as its duplicate.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import orjson

from .errors import InvalidInput
from .ids import check_id
from .ordering_keys import check_ordering_key
from .records import Message, check_depth, check_event_type, reject_unknown
from .subscriptions import STAR, check_tenant
from .untrusted import producer_time

EVENT_FIELDS = {"event_type", "payload", "tenant", "id", "ordering_key"}


@dataclass(slots=True, frozen=True)
class Event:
    id: str
    event_type: str
    payload: Any
    tenant: str | None = None
    accepted_at: float = 0.0
    time_note: str = ""  # why the producer's accepted_at was not used (the broker's time was)
    ordering_key: str = ""  # its copies' key (key-ordered receivers keep one key's messages in order)


def parse_event_spec(body: object, make_id: Any, now: float) -> Event:
    """Validate `POST /v1/events`; errors name the field."""
    if not isinstance(body, dict):
        raise InvalidInput("body", "must be a JSON object")
    reject_unknown(body, EVENT_FIELDS, "")
    event_type = check_event_type(body.get("event_type"), "event_type")
    if STAR in event_type.split("."):
        raise InvalidInput("event_type", "must be a type, not a pattern (no * segments)")
    if "payload" not in body:
        raise InvalidInput("payload", "is required")
    check_depth(body["payload"], "payload")
    event_id = check_id(body["id"], "id") if "id" in body else make_id()
    tenant = check_tenant(body.get("tenant"), "tenant")
    key = check_ordering_key(body.get("ordering_key"), "ordering_key")
    return Event(event_id, event_type, body["payload"], tenant, now, ordering_key=key)


def encode_event(event: Event) -> bytes:
    """The events-topic record (the API's and direct producers' format)."""
    record: dict[str, Any] = {"id": event.id, "event_type": event.event_type, "payload": event.payload}
    record["accepted_at"] = event.accepted_at
    if event.tenant is not None:
        record["tenant"] = event.tenant
    if event.ordering_key:
        record["ordering_key"] = event.ordering_key
    return orjson.dumps(record)


def decode_event(raw: bytes, fallback_id: str, fallback_time: float) -> Event:
    """An events-topic record; a direct producer may leave out `id` and `accepted_at`."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidInput("record", f"is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise InvalidInput("record", "must be a JSON object")
    event = parse_event_spec({k: v for k, v in data.items() if k != "accepted_at"}, lambda: fallback_id, 0.0)
    at, note = producer_time(data.get("accepted_at"), fallback_time)
    return Event(event.id, event.event_type, event.payload, event.tenant, at, note, event.ordering_key)


def copy_id(event_id: str, receiver_id: str, tenant: str | None = None) -> str:
    """The message id of the copy for `receiver_id` of `tenant`'s event `event_id` (None: published
    without a tenant): the same every time it is derived, and another tenant's never."""
    # An untenanted event keeps the derivation it had before tenants counted (its retries dedup
    # across an upgrade); a tenant, [A-Za-z0-9_.:-], cannot contain the separator.
    scope = "" if tenant is None else f"{tenant}\0"
    digest = hashlib.blake2b(f"{scope}{event_id}\0{receiver_id}".encode(), digest_size=12).hexdigest()
    return f"evt_{digest}"


def copy_for(event: Event, receiver_id: str) -> Message:
    msg_id = copy_id(event.id, receiver_id, event.tenant)
    return Message(
        msg_id, receiver_id, event.event_type, event.payload, {}, event.accepted_at, from_event=True,
        time_note=event.time_note, ordering_key=event.ordering_key,
    )
