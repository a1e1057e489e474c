"""Retry policy: what an attempt's result means, and when the next attempt goes.

Classification follows Standard Webhooks: any 2xx is success; a redirect is a
failure (never followed); connect errors, timeouts, resets, 408, 425, 429 and
5xx except 501 are worth retrying; other 4xx and 501 are permanent; 410 Gone
disables the receiver. A receiver may move codes between the retryable and
permanent sets.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field, replace
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any

from .errors import InvalidInput

DAY = 86400.0
MAX_RETRY_AFTER = DAY
# Standard Webhooks' example schedule: delays after the 1st, 2nd, ... failure.
STANDARD_SCHEDULE: tuple[float, ...] = (
    5.0, 300.0, 1800.0, 7200.0, 18000.0, 36000.0, 36000.0, 50400.0, 72000.0, 86400.0,
)
_RETRYABLE = frozenset({408, 425, 429})
_DELTA_SECONDS_RE = re.compile(r"[0-9]+")  # ASCII only: str.isdigit() takes "²" and "٣"
_DURATION_RE = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)?")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": DAY, None: 1.0}


class Verdict(enum.StrEnum):
    SUCCESS = "success"
    RETRY = "retry"
    PERMANENT = "permanent"
    GONE = "gone"


@dataclass(slots=True, frozen=True)
class RetryPolicy:
    """Per-receiver retry settings; `schedule=()` means capped exponential."""

    schedule: tuple[float, ...] = STANDARD_SCHEDULE
    base: float = 5.0
    cap: float = DAY
    jitter: float = 0.2  # ± fraction for fixed schedules; exponential uses full jitter
    max_attempts: int = len(STANDARD_SCHEDULE) + 1
    max_age: float = 3 * DAY
    retryable_statuses: frozenset[int] = field(default_factory=frozenset)
    permanent_statuses: frozenset[int] = field(default_factory=frozenset)

    def classify(self, status: int | None) -> Verdict:
        """`status` None means no HTTP answer (connect error, timeout, reset)."""
        if status is None:
            return Verdict.RETRY
        if 200 <= status < 300:
            return Verdict.SUCCESS
        if status in self.permanent_statuses:
            return Verdict.PERMANENT
        if status in self.retryable_statuses:
            return Verdict.RETRY
        if status == 410:
            return Verdict.GONE
        if status in _RETRYABLE or (500 <= status < 600 and status != 501):
            return Verdict.RETRY
        if 300 <= status < 400:
            return Verdict.RETRY  # a moved endpoint may come back; the breaker limits the cost
        if status < 200:  # an informational answer as the final one (101: it switched protocols)
            return Verdict.RETRY  # as http1.py treats it: no answer to the request
        return Verdict.PERMANENT

    def delay(self, failures: int, rand: float) -> float:
        """Seconds to wait after the `failures`-th failed attempt; `rand` uniform in [0, 1)."""
        n = max(1, failures)
        if not self.schedule:
            # full jitter; past 2**1000 the cap has long won (2**1024 is past a float)
            return rand * min(self.cap, self.base * 2.0 ** min(n - 1, 1000))
        raw = self.schedule[min(n, len(self.schedule)) - 1]
        return max(0.0, raw * (1 + self.jitter * (2 * rand - 1)))

    def next_delay(self, failures: int, rand: float, retry_after: float | None) -> float:
        """The scheduled delay, stretched (never shortened) by a valid Retry-After."""
        scheduled = self.delay(failures, rand)
        if retry_after is None:
            return scheduled
        # The cap bounds what the receiver may ask for, never the receiver's own schedule (up to 30 days).
        return max(min(retry_after, MAX_RETRY_AFTER), scheduled)

    def as_dict(self) -> dict[str, Any]:
        return {
            "schedule": list(self.schedule) if self.schedule else "exponential",
            "base": self.base,
            "cap": self.cap,
            "jitter": self.jitter,
            "max_attempts": self.max_attempts,
            "max_age": self.max_age,
            "retryable_statuses": sorted(self.retryable_statuses),
            "permanent_statuses": sorted(self.permanent_statuses),
        }

    def with_overrides(self, spec: object, prefix: str = "retry") -> RetryPolicy:
        """Apply a receiver's `retry` object over these defaults; raise naming the field at fault."""
        if spec is None:
            return self
        if not isinstance(spec, dict):
            raise InvalidInput(prefix, "must be an object")
        allowed = set(self.as_dict())
        for key in spec:
            if key not in allowed:
                raise InvalidInput(f"{prefix}.{key}", "is not a known field")
        out = self
        if "schedule" in spec:
            out = replace(out, schedule=_schedule(spec["schedule"], f"{prefix}.schedule"))
        for name, low, high in (("base", 0.001, DAY), ("cap", 0.001, 30 * DAY), ("jitter", 0.0, 1.0)):
            if name in spec:
                number: dict[str, Any] = {name: _number(spec[name], f"{prefix}.{name}", low, high)}
                out = replace(out, **number)
        if "max_attempts" in spec:
            value = spec["max_attempts"]
            if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 10_000:
                raise InvalidInput(f"{prefix}.max_attempts", "must be an integer 1..10000")
            out = replace(out, max_attempts=value)
        if "max_age" in spec:
            out = replace(out, max_age=_number(spec["max_age"], f"{prefix}.max_age", 1.0, 90 * DAY))
        for name in ("retryable_statuses", "permanent_statuses"):
            if name in spec:
                statuses: dict[str, Any] = {name: _statuses(spec[name], f"{prefix}.{name}")}
                out = replace(out, **statuses)
        both = out.retryable_statuses & out.permanent_statuses
        if both:
            raise InvalidInput(f"{prefix}.permanent_statuses", f"{sorted(both)} also listed as retryable")
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RetryPolicy:
        return cls().with_overrides(data)


def parse_retry_after(value: str | None, now: float) -> float | None:
    """Seconds to wait from a `Retry-After` value (delta-seconds or HTTP-date).

    Garbage, negative and past values give None (fall back to the schedule).
    Total: the value is a receiver's, so nothing it holds may raise here.
    """
    if not isinstance(value, str):
        return None
    text = value.strip()[:64]
    if not text:
        return None
    if _DELTA_SECONDS_RE.fullmatch(text):
        return float(text) if len(text) <= 12 else MAX_RETRY_AFTER
    try:
        when: datetime = parsedate_to_datetime(text)
        if when.tzinfo is None:  # HTTP-dates are GMT
            return None
        delta = when.timestamp() - now
    except Exception:  # noqa: BLE001 - any date the parser cannot take is garbage
        return None
    return delta if delta > 0 else None


def parse_duration(text: str, name: str) -> float:
    """`500ms`, `5s`, `5m`, `2h`, `1d` or plain seconds."""
    match = _DURATION_RE.fullmatch(text.strip())
    if not match:
        raise InvalidInput(name, f"{text!r} is not a duration like 5s, 5m, 2h or 1d")
    return float(match.group(1)) * _UNITS[match.group(2)]


def parse_schedule(text: str, name: str) -> tuple[float, ...]:
    """`exponential` or a comma-separated list of durations."""
    if text.strip().lower() == "exponential":
        return ()
    return _schedule([part for part in text.split(",") if part.strip()], name)


def _schedule(value: object, name: str) -> tuple[float, ...]:
    if value == "exponential":
        return ()
    if not isinstance(value, list) or not 1 <= len(value) <= 100:
        raise InvalidInput(name, 'must be "exponential" or a list of 1..100 delays in seconds')
    out = []
    for i, item in enumerate(value):
        if isinstance(item, str):
            out.append(parse_duration(item, f"{name}[{i}]"))
        else:
            out.append(_number(item, f"{name}[{i}]", 0.0, 30 * DAY))
    return tuple(out)


def _number(value: object, name: str, low: float, high: float) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not low <= value <= high:
        raise InvalidInput(name, f"must be a number {low:g}..{high:g}")
    return float(value)


def _statuses(value: object, name: str) -> frozenset[int]:
    if not isinstance(value, list) or len(value) > 100:
        raise InvalidInput(name, "must be a list of HTTP status codes")
    for i, code in enumerate(value):
        if not isinstance(code, int) or isinstance(code, bool) or not 100 <= code <= 599:
            raise InvalidInput(f"{name}[{i}]", "must be an HTTP status code 100..599")
        if 200 <= code < 300:
            raise InvalidInput(f"{name}[{i}]", "2xx is always success")
    return frozenset(value)
