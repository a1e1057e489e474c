"""Recover: which dead letters one `POST /v1/receivers/{id}/recover` call sends again.

Pure: the request's time window and cursor are parsed with `now` passed in,
and a page is picked from dead letters already read (in seq order).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .errors import InvalidInput

RECOVER_FIELDS = ("since", "until", "after_seq", "limit")


@dataclass(frozen=True, slots=True)
class RecoverRequest:
    """Dead letters with `since <= at <= until` and seqs above `after_seq`, at most `limit` of them."""

    since: float
    until: float
    after_seq: int = 0
    limit: int = 1000


def parse_instant(value: object, field: str) -> float:
    """Unix seconds (a number, or a string of one) or an RFC 3339 time with its offset."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise InvalidInput(field, "must be unix seconds or an RFC 3339 time")
    if isinstance(value, str):
        value = _from_text(value, field)
    if not math.isfinite(value) or value < 0:
        raise InvalidInput(field, "must be a time at or after 1970-01-01T00:00:00Z")
    return float(value)


def _from_text(text: str, field: str) -> float:
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise InvalidInput(field, f"{text[:40]!r} is neither unix seconds nor an RFC 3339 time") from None
    if moment.tzinfo is None:
        raise InvalidInput(field, "an RFC 3339 time needs its offset (Z or +hh:mm)")
    return moment.timestamp()


def parse_recover(body: object, now: float, max_limit: int) -> RecoverRequest:
    """The request in `body`; `until` defaults to `now`, so later dead letters wait for the next call."""
    if not isinstance(body, dict):
        raise InvalidInput("body", "must be a JSON object")
    unknown = [key for key in body if key not in RECOVER_FIELDS]
    if unknown:
        raise InvalidInput(str(unknown[0]), "is not a known field")
    if "since" not in body:
        raise InvalidInput("since", "is required: unix seconds or an RFC 3339 time")
    since = parse_instant(body["since"], "since")
    until = parse_instant(body["until"], "until") if body.get("until") is not None else now
    if until < since:
        raise InvalidInput("until", "must not be before since")
    after_seq = _whole(body, "after_seq", 0, 0, 2**62)
    limit = _whole(body, "limit", min(1000, max_limit), 1, max_limit)
    return RecoverRequest(since, until, after_seq, limit)


def _whole(body: Mapping[str, Any], name: str, default: int, low: int, high: int) -> int:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidInput(name, f"must be an integer {low}..{high}")
    return value


def recover_page(
    letters: Sequence[Mapping[str, Any]], request: RecoverRequest, more: bool
) -> tuple[list[Mapping[str, Any]], int | None]:
    """The letters (read in seq order above the cursor) in the window, up to `limit`, and the cursor
    for the next call: None once nothing is left (`more`: dead letters past the ones read)."""
    chosen: list[Mapping[str, Any]] = []
    for letter in letters:
        if request.since <= letter["at"] <= request.until:
            chosen.append(letter)
            if len(chosen) == request.limit:
                last = letter is letters[-1]
                return chosen, None if last and not more else letter["seq"]
    return chosen, (letters[-1]["seq"] if more and letters else None)
