"""Bounds on what comes from outside: a receiver's answer, a producer's record.

Everything here is pure and total: it never raises, whatever it is given, so
no value a receiver or producer chose can break the actor's decision or a
dead letter's encoding.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeGuard

if TYPE_CHECKING:
    from .records import Outcome

MAX_KEPT_HEADERS = 16
MAX_HEADER_NAME = 64
MAX_HEADER_VALUE = 1024
MAX_BODY_PREFIX = 1024
MAX_ERROR = 500
RAW_PREFIX = 2048  # bytes of an unreadable record a dead letter keeps
# Producer timestamps: how far from the broker's own they may be and still count.
MAX_FUTURE_SKEW = 300.0
MAX_PAST = 90 * 86400.0  # the longest max_age a receiver may set


_NOT_IN_AN_ID = re.compile(r"[^A-Za-z0-9_-]")
# What a terminal or a log reader may take for a line's end or a change of direction: C0 (the
# newline too), DEL, C1, the line and paragraph separators, bidi overrides and isolates; and `=`,
# which would let the text plant a `seq=` or `status=` of its own in the JSON log's fields.
_NOT_ON_ONE_LINE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069=]")


def escaped(found: re.Match[str]) -> str:
    """A matched character as the text `\\x1b` or `\\u202e`."""
    code = ord(found.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def log_token(value: str, limit: int = 256) -> str:
    """An id from outside as one token of a log line: what a valid id may not hold is escaped
    (`\\x20`, `\\u2028`), so a hostile key can neither start a forged line nor plant a `reason=`."""
    return _NOT_IN_AN_ID.sub(escaped, value[:limit])


def one_line(text: str) -> str:
    """Free text from outside on one log line: what could break or turn the line, or plant a field,
    escaped; the rest kept."""
    return _NOT_ON_ONE_LINE.sub(escaped, text)


def outsider_text(text: str | None) -> str | None:
    """`one_line` for a value that may be absent (an outcome's error)."""
    return None if text is None else one_line(text)


def clean_text(value: object, limit: int) -> str:
    """A string safe to encode as JSON and log: valid UTF-8 (lone surrogates replaced), at most `limit`."""
    if isinstance(value, str):
        text = value[:limit]
    else:
        try:  # repr can raise (an int past Python's 4,300 digits) or be huge
            text = "" if value is None else repr(value)[:limit]
        except Exception:  # noqa: BLE001 - total: the type's name says enough
            text = f"<{type(value).__name__}>"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "replace").decode("utf-8")
    return text


def clean_status(value: object) -> int | None:
    """An HTTP status a receiver sent, or None when it is not one (counts as no answer)."""
    if isinstance(value, int) and not isinstance(value, bool) and 100 <= value <= 999:
        return value
    return None


def clean_headers(headers: object) -> dict[str, str]:
    if not isinstance(headers, dict):
        return {}
    out: dict[str, str] = {}
    for name, value in list(headers.items())[:MAX_KEPT_HEADERS]:
        out[clean_text(name, MAX_HEADER_NAME).lower()] = clean_text(value, MAX_HEADER_VALUE)
    return out


MAX_LATENCY_MS = 86_400_000.0  # a day: no attempt waits longer


def clean_latency(value: object) -> float:
    if _finite(value) and value >= 0:
        return min(float(value), MAX_LATENCY_MS)
    return 0.0


def _finite(value: object) -> TypeGuard[float]:
    """A finite int or float (not a bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def safe_outcome(outcome: Outcome, now: float) -> Outcome:
    """The outcome with every value a receiver could shape made well-formed and bounded.

    A status that is not an HTTP status becomes "no answer" (a failed attempt on
    the normal schedule); an `at` that is not a finite time becomes `now`.
    Outcomes already well-formed (nearly all) are returned as they are: the
    check costs a fraction of a rebuild (docs/benchmarks.md, "Hardening").
    """
    if _well_formed(outcome):
        return outcome
    status = clean_status(outcome.status)
    error = outcome.error
    if status is None and outcome.status is not None:
        error = f"invalid HTTP status {clean_text(outcome.status, 40)}"
    at = outcome.at
    if not _finite(at):
        at = now
    return replace(
        outcome,
        ok=bool(outcome.ok) and status is not None and 200 <= status < 300,
        status=status,
        error=None if error is None else clean_text(error, MAX_ERROR),
        latency_ms=clean_latency(outcome.latency_ms),
        at=float(at),
        body_prefix=clean_text(outcome.body_prefix, MAX_BODY_PREFIX),
        headers=clean_headers(outcome.headers),
    )


def _well_formed(o: Outcome) -> bool:
    status, latency, at, headers = o.status, o.latency_ms, o.at, o.headers
    if status is None:
        ok_status = not o.ok
    else:
        ok_status = type(status) is int and 100 <= status <= 999 and o.ok == (200 <= status < 300)
    return (
        ok_status
        and type(latency) is float and 0.0 <= latency <= MAX_LATENCY_MS
        and type(at) is float and math.isfinite(at)
        and _short_ascii(o.body_prefix, MAX_BODY_PREFIX)
        and (o.error is None or _short_ascii(o.error, MAX_ERROR))
        and type(headers) is dict and len(headers) <= MAX_KEPT_HEADERS
        and all(_short_ascii(k, MAX_HEADER_NAME) and _short_ascii(v, MAX_HEADER_VALUE) and k.islower()
                for k, v in headers.items())
    )


def _short_ascii(value: object, limit: int) -> bool:
    """A str of at most `limit` ASCII characters: encodable as it is (ASCII is valid UTF-8)."""
    return type(value) is str and len(value) <= limit and value.isascii()


def raw_summary(raw: bytes | None, prefix: int = RAW_PREFIX) -> dict[str, Any]:
    """What a dead letter keeps of a record it cannot read: a bounded prefix, the size and a sha256."""
    data = raw or b""
    return {
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "prefix": data[:prefix].decode("utf-8", "replace"),
        "truncated": len(data) > prefix,
    }


def broker_time(timestamp: object, now: float) -> float:
    """A record's timestamp (CreateTime: the producer sets it) if it is a sane time, else `now`."""
    if _finite(timestamp) and 0 < timestamp <= now + MAX_FUTURE_SKEW:
        return float(timestamp)
    return now


def producer_time(value: object, stamped: float) -> tuple[float, str]:
    """A producer's `accepted_at`, or the broker's timestamp with a note saying why not.

    Milliseconds, far-future or ancient times would make every attempt fail as
    "too old" (or never expire) and be blamed on the receiver.
    """
    if value is None:
        return stamped, ""
    if not _finite(value):
        return stamped, "accepted_at is not a number of seconds: the broker's timestamp is used"
    if stamped > 0 and not stamped - MAX_PAST <= value <= stamped + MAX_FUTURE_SKEW:
        return stamped, (
            f"accepted_at {value:.17g} is out of range (more than {MAX_FUTURE_SKEW:g} s ahead of or "
            f"{MAX_PAST / 86400:g} days behind the broker's timestamp): the broker's timestamp is used"
        )
    if value <= 0:
        return stamped, "accepted_at must be positive: the broker's timestamp is used"
    return float(value), ""
