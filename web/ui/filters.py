"""Jinja filters: times, ages, hosts, JSON and window changes as text (autoescaped like everything else)."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import orjson
from yarl import URL


def when(epoch: float | None) -> str:
    """Epoch seconds as UTC, to the second; a dash for none."""
    if not epoch:
        return "—"
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def age(seconds: float | None) -> str:
    """A duration in the largest unit that fits: 42 s, 3 min, 5 h, 2 d."""
    if seconds is None:
        return "—"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit}"
    return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"


def ago(epoch: float | None) -> str:
    return "—" if not epoch else age(max(0.0, time.time() - epoch)) + " ago"


def host(url: str) -> str:
    try:
        parsed = URL(url)
    except ValueError:
        return url
    if parsed.port and not parsed.is_default_port():
        return f"{parsed.host}:{parsed.port}"
    return str(parsed.host)


def as_json(value: Any) -> str:
    """Pretty JSON as plain text (the template escapes it)."""
    return orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode()


def ms(value: float | None) -> str:
    """A latency in milliseconds, to a tenth below 10 ms and whole above."""
    if value is None:
        return "—"
    return f"{value:.1f} ms" if value < 10 else f"{value:.0f} ms"


def percent(ratio: float | None) -> str:
    return "—" if ratio is None else f"{ratio * 100:.1f} %"


# Why an adaptive in-flight window last changed (dispatcher/domain/aimd.py), for a person.
WINDOW_REASONS = {
    "start": "started at 1", "grew": "grew after a run of fast answers",
    "ceiling": "lowered to max_in_flight", "429": "halved on a 429 answer", "503": "halved on a 503 answer",
    "timeout": "halved on a timeout", "latency": "halved on an answer slower than the baseline",
}


def window_reason(reason: str | None) -> str:
    """Why the window last changed, in words; a reason this console does not know, as it is."""
    if not reason:
        return "—"
    return WINDOW_REASONS.get(reason, reason)


FILTERS = {
    "when": when, "age": age, "ago": ago, "host": host, "as_json": as_json, "percent": percent, "ms": ms,
    "window_reason": window_reason,
}
