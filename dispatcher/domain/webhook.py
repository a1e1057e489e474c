"""The request a receiver gets: Standard Webhooks headers and body, as bytes."""

from __future__ import annotations

import hashlib
import math
from datetime import UTC, datetime
from typing import Any

import orjson

from .jsone_bounded import Budget
from .records import ReceiverConfig
from .signing import signature_header
from .transform import Transformed, apply, join_url, message_context, receiver_context

# The last whole second formatted: a drain formats the same few seconds thousands of times.
_last_second: list[Any] = [None, ""]


def iso_timestamp(epoch: float) -> str:
    """RFC 3339 UTC time with milliseconds, e.g. 2024-01-01T00:00:00.000Z (as datetime rounds)."""
    second = math.floor(epoch)
    micros = round((epoch - second) * 1e6)  # exact fraction, rounded half-even like datetime
    if micros >= 1_000_000:
        second, micros = second + 1, micros - 1_000_000
    if _last_second[0] != second:
        _last_second[:] = [second, datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S")]
    return f"{_last_second[1]}.{micros // 1000:03d}Z"


def build_body(entry: dict[str, Any]) -> bytes:
    """`{"type", "timestamp", "data"}` for one backlog entry."""
    return orjson.dumps(
        {"type": entry["type"], "timestamp": iso_timestamp(entry["accepted_at"]), "data": entry["data"]}
    )


def signed_headers(config: ReceiverConfig, msg_id: str, body: bytes, now: float) -> dict[str, str]:
    """`webhook-id`, `-timestamp` and `-signature`: one signature per secret active at `now`."""
    timestamp = int(now)
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature_header(config.active_secrets(now), msg_id, timestamp, body),
    }


def build_headers(
    config: ReceiverConfig, entry: dict[str, Any], body: bytes, now: float,
    extra: dict[str, str] | None = None,
) -> dict[str, str]:
    """Receiver headers, the message's (validated at the API), a transform's, then ours, which win."""
    per_message = entry.get("headers") or {}
    headers = custom_headers(config, {**per_message, **extra} if extra else per_message)
    headers["content-type"] = "application/json"
    headers.update(signed_headers(config, entry["id"], body, now))
    headers["webhook-sequence"] = str(entry["seq"])
    headers["webhook-event-type"] = entry["type"]
    if entry.get("replay_of") is not None:
        headers["webhook-replay-of"] = str(entry["replay_of"])
    return headers


def custom_headers(config: ReceiverConfig, per_message: dict[str, str]) -> dict[str, str]:
    """Merged case-insensitively (a message's header replaces the receiver's of the same name)."""
    merged = {name.lower(): (name, value) for name, value in config.headers.items()}
    merged.update({name.lower(): (name, value) for name, value in per_message.items()})
    headers = dict(merged.values())
    if config.authorization:
        headers["authorization"] = config.authorization
    return headers


def build_ping(receiver_id: str, attempt_time: float) -> bytes:
    """The body of a `webhook.ping`: sent to probe an open circuit, or on request."""
    data = {"receiver_id": receiver_id}
    return orjson.dumps({"type": "webhook.ping", "timestamp": iso_timestamp(attempt_time), "data": data})


def build_ping_headers(
    config: ReceiverConfig, ping_id: str, body: bytes, now: float, event_type: str = "webhook.ping"
) -> dict[str, str]:
    """Signed like a message, but without a seq: a ping (or heartbeat) is not part of the ordered stream."""
    headers = custom_headers(config, {})
    headers["content-type"] = "application/json"
    headers.update(signed_headers(config, ping_id, body, now))
    headers["webhook-event-type"] = event_type
    return headers


def build_heartbeat(receiver_id: str, last_seq: int, attempt_time: float) -> bytes:
    """The body of a `webhook.heartbeat`: every seq up to `last_seq` was delivered or dead-lettered."""
    data = {"receiver_id": receiver_id, "last_seq": last_seq}
    return orjson.dumps({"type": "webhook.heartbeat", "timestamp": iso_timestamp(attempt_time), "data": data})


def batch_id(receiver_id: str, first: int, last: int) -> str:
    """The `webhook-id` of a batch: the same for every retry of the same range."""
    digest = hashlib.blake2b(receiver_id.encode(), digest_size=6).hexdigest()
    return f"batch_{digest}_{first}-{last}"


def build_batch_body(entries: list[dict[str, Any]]) -> bytes:
    """`{"events": [{"seq", "id", "type", "timestamp", "data"}, ...]}`, oldest first."""
    events = []
    for entry in entries:
        event = {
            "seq": entry["seq"],
            "id": entry["id"],
            "type": entry["type"],
            "timestamp": iso_timestamp(entry["accepted_at"]),
            "data": entry["data"],
        }
        if entry.get("replay_of") is not None:
            event["replay_of"] = entry["replay_of"]
        events.append(event)
    return orjson.dumps({"events": events})


def build_batch_headers(
    config: ReceiverConfig, entries: list[dict[str, Any]], body: bytes, now: float
) -> dict[str, str]:
    """Signed as a whole; `webhook-sequence` is the range `first-last`.

    Per-message headers do not apply to a batch (its messages may disagree);
    the receiver's own headers do.
    """
    first, last = entries[0]["seq"], entries[-1]["seq"]
    headers = custom_headers(config, {})
    headers["content-type"] = "application/json"
    headers.update(signed_headers(config, batch_id(config.id, first, last), body, now))
    headers["webhook-sequence"] = f"{first}-{last}"
    headers["webhook-event-type"] = BATCH_EVENT_TYPE
    return headers


BATCH_EVENT_TYPE = "webhook.batch"


def transform_entry(
    config: ReceiverConfig, entry: dict[str, Any], now: float, budget: Budget | None = None
) -> Transformed:
    """The receiver's transform (it has one) run on one backlog entry; TransformError if it fails."""
    assert config.transform is not None
    receiver = receiver_context(config.id, config.tenant, config.event_types)
    accepted = iso_timestamp(entry.get("accepted_at") or 0.0)
    context = message_context(entry, receiver, accepted, iso_timestamp(now))
    return apply(config.transform, context, budget)


def build_transformed(
    config: ReceiverConfig, entry: dict[str, Any], shaped: Transformed, now: float
) -> tuple[str, bytes, dict[str, str]]:
    """(URL, body, headers) of a transformed message: signed over the body it sends."""
    body = shaped.body if shaped.body is not None else build_body(entry)
    return join_url(config.url, shaped.path), body, build_headers(config, entry, body, now, shaped.headers)
