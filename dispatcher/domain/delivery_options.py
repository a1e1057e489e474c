"""How one receiver wants its messages: order, concurrency, rate, batching, backlog caps.

Zero (or "") means "the worker's default", so changing a default reaches every
receiver that did not choose for itself.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from .errors import InvalidInput

STRICT = "strict"
UNORDERED = "none"
ORDERINGS = (STRICT, UNORDERED)
DEAD_LETTER_OLDEST = "dead_letter_oldest"
REJECT = "reject"
OVERFLOW_POLICIES = (DEAD_LETTER_OLDEST, REJECT)

MAX_IN_FLIGHT = 64
MAX_BATCH = 1000
MAX_BATCH_BYTES = 16 * 1024 * 1024
MAX_RATE = 100_000.0


@dataclass(slots=True, frozen=True)
class DeliveryOptions:
    ordering: str = STRICT
    max_in_flight: int = 1  # concurrent POSTs; above 1 only with ordering "none"
    rate_limit: float = 0.0  # events per second; 0 = no limit
    batch_max: int = 1  # events per POST; above 1 sends {"events": [...]}
    batch_max_bytes: int = 0
    backlog_max: int = 0  # buffered messages
    backlog_max_bytes: int = 0
    backlog_overflow: str = ""  # dead_letter_oldest or reject

    @property
    def ordered(self) -> bool:
        return self.ordering == STRICT

    @property
    def batching(self) -> bool:
        return self.batch_max > 1

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in OPTION_NAMES}  # scalars only: no deep copy

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DeliveryOptions:
        return cls(**{name: data[name] for name in OPTION_NAMES if name in data})


OPTION_NAMES = tuple(f.name for f in fields(DeliveryOptions))
OPTION_FIELDS = frozenset(OPTION_NAMES)


def parse_delivery_options(body: dict[str, Any], current: DeliveryOptions | None) -> DeliveryOptions:
    """The options a create/replace body sets; what it leaves out keeps its current value."""
    base = current or DeliveryOptions()
    ordering = body.get("ordering", base.ordering)
    if ordering not in ORDERINGS:
        raise InvalidInput("ordering", f"must be one of {', '.join(ORDERINGS)}")
    # Back to strict without a max_in_flight of its own: the ordered 1, not the old window.
    default_in_flight = 1 if ordering == STRICT else base.max_in_flight
    max_in_flight = _whole(body, "max_in_flight", default_in_flight, 1, MAX_IN_FLIGHT)
    if ordering == STRICT and max_in_flight != 1:
        raise InvalidInput("max_in_flight", 'must be 1 for ordered receivers; set "ordering": "none"')
    batch_max = _whole(body, "batch_max", base.batch_max, 1, MAX_BATCH)
    if batch_max > 1 and ordering != STRICT:
        raise InvalidInput("batch_max", 'batches are sent in order: use "ordering": "strict" with batching')
    rate = body.get("rate_limit", base.rate_limit)
    rate = 0.0 if rate is None else rate
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 <= rate <= MAX_RATE:
        raise InvalidInput("rate_limit", f"must be events per second in 0..{MAX_RATE:g} (0 or null: none)")
    overflow = body.get("backlog_overflow", base.backlog_overflow) or ""
    if overflow and overflow not in OVERFLOW_POLICIES:
        raise InvalidInput("backlog_overflow", f"must be one of {', '.join(OVERFLOW_POLICIES)}")
    return DeliveryOptions(
        ordering=ordering,
        max_in_flight=max_in_flight,
        rate_limit=float(rate),
        batch_max=batch_max,
        batch_max_bytes=_whole(body, "batch_max_bytes", base.batch_max_bytes, 0, MAX_BATCH_BYTES),
        backlog_max=_whole(body, "backlog_max", base.backlog_max, 0, 10**12),
        backlog_max_bytes=_whole(body, "backlog_max_bytes", base.backlog_max_bytes, 0, 1 << 50),
        backlog_overflow=overflow,
    )


def _whole(body: dict[str, Any], name: str, default: int, low: int, high: int) -> int:
    value = body.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidInput(name, f"must be a whole number in {low}..{high}")
    return value
