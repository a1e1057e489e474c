"""The request a receiver gets: Standard Webhooks headers and body, as bytes."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson

from .signing import decode_secret, signature_header


def iso_timestamp(epoch: float) -> str:
    """RFC 3339 UTC time with milliseconds, e.g. 2024-01-01T00:00:00.000Z."""
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds")[:-6] + "Z"


def build_body(entry: dict[str, Any]) -> bytes:
    """`{"type", "timestamp", "data"}` for one backlog entry."""
    return orjson.dumps(
        {"type": entry["type"], "timestamp": iso_timestamp(entry["accepted_at"]), "data": entry["data"]}
    )


def build_headers(
    secret: str, entry: dict[str, Any], body: bytes, attempt_time: int, custom: dict[str, str]
) -> dict[str, str]:
    """Custom headers first (validated at the API), then ours, which always win."""
    msg_id = entry["id"]
    headers = dict(custom)
    headers.update(entry.get("headers") or {})
    headers.update(
        {
            "content-type": "application/json",
            "webhook-id": msg_id,
            "webhook-timestamp": str(attempt_time),
            "webhook-signature": signature_header(
                [decode_secret(secret)], msg_id, attempt_time, body
            ),
            "webhook-sequence": str(entry["seq"]),
            "webhook-event-type": entry["type"],
        }
    )
    if entry.get("replay_of") is not None:
        headers["webhook-replay-of"] = str(entry["replay_of"])
    return headers


def build_ping(receiver_id: str, attempt_time: float) -> bytes:
    """The body of a `webhook.ping`: sent to probe an open circuit, or on request."""
    data = {"receiver_id": receiver_id}
    return orjson.dumps({"type": "webhook.ping", "timestamp": iso_timestamp(attempt_time), "data": data})


def build_ping_headers(secret: str, ping_id: str, body: bytes, attempt_time: int) -> dict[str, str]:
    """Signed like a message, but without a seq: a ping is not part of the ordered stream."""
    return {
        "content-type": "application/json",
        "webhook-id": ping_id,
        "webhook-timestamp": str(attempt_time),
        "webhook-signature": signature_header([decode_secret(secret)], ping_id, attempt_time, body),
        "webhook-event-type": "webhook.ping",
    }
