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
KEYED = "key"  # in order per message ordering key, keys side by side (ordering_keys.py)
ORDERINGS = (STRICT, UNORDERED, KEYED)
DEAD_LETTER_OLDEST = "dead_letter_oldest"
REJECT = "reject"
OVERFLOW_POLICIES = (DEAD_LETTER_OLDEST, REJECT)
ADAPTIVE = "adaptive"  # the in-flight window adapts to the receiver (aimd.py); max_in_flight is its ceiling
FIXED = "fixed"  # max_in_flight out whenever there are that many
CONCURRENCY_MODES = (ADAPTIVE, FIXED)
OBEY = "obey"  # the receiver may steer its delivery with a response header (delivery_control.py)
IGNORE = "ignore"
CONTROL_MODES = (OBEY, IGNORE)
MIN_HEARTBEAT = 1.0
MAX_HEARTBEAT = 86_400.0

MAX_IN_FLIGHT = 64
MAX_BATCH = 1000
MAX_BATCH_BYTES = 16 * 1024 * 1024
# A rate is tokens a second with a burst of max(1, rate) (ratelimit.py), so the wait for the next
# token is up to 1/rate seconds. At 0.01/s that is 100 s; below it a message waits hours, and a
# tiny rate like 1e-310 makes the wait infinite: the next attempt time cannot be stored (JSON has
# no infinity) nor put on a timer wheel, and the receiver never sends again. Slower than one message
# per 100 s is a pause, which has its own call.
MIN_RATE = 0.01
MAX_RATE = 100_000.0
# The backlog byte cap must hold a message: below a message's size every message is dead-lettered
# (or refused) the moment it arrives. 1 MiB holds four messages of the largest default size
# (DISPATCHER_MAX_PAYLOAD, 256 KiB).
MIN_BACKLOG_BYTES = 1 << 20
MAX_BACKLOG = 10**12
MAX_BACKLOG_BYTES = 1 << 50


@dataclass(slots=True, frozen=True)
class DeliveryOptions:
    ordering: str = STRICT
    max_in_flight: int = 1  # concurrent POSTs; above 1 only with ordering "none" or "key"
    rate_limit: float = 0.0  # events per second; 0 = no limit
    batch_max: int = 1  # events per POST; above 1 sends {"events": [...]}
    batch_max_bytes: int = 0
    backlog_max: int = 0  # buffered messages
    backlog_max_bytes: int = 0
    backlog_overflow: str = ""  # dead_letter_oldest or reject
    concurrency: str = ADAPTIVE  # unordered receivers: adaptive or fixed
    delivery_control: str = OBEY  # obey or ignore the receiver's webhook-delivery-control header
    heartbeat_interval: float = 0.0  # seconds idle before a webhook.heartbeat; 0 = none
    coalesce: bool = False  # key-ordered: a message waiting is superseded by a newer one of its key

    @property
    def ordered(self) -> bool:
        return self.ordering == STRICT

    @property
    def keyed(self) -> bool:
        return self.ordering == KEYED

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
    ordering = _one_of(body, "ordering", base.ordering, ORDERINGS)
    # Back to strict without a max_in_flight of its own: the ordered 1, not the old window.
    default_in_flight = 1 if ordering == STRICT else base.max_in_flight
    max_in_flight = _whole(body, "max_in_flight", default_in_flight, 1, MAX_IN_FLIGHT)
    if ordering == STRICT and max_in_flight != 1:
        why = 'must be 1 for ordered receivers; set "ordering": "key" or "none"'
        raise InvalidInput("max_in_flight", why)
    batch_max = _whole(body, "batch_max", base.batch_max, 1, MAX_BATCH)
    if batch_max > 1 and ordering != STRICT:
        raise InvalidInput("batch_max", 'batches are sent in order: use "ordering": "strict" with batching')
    coalesce = body.get("coalesce", base.coalesce if ordering == KEYED else False)
    if not isinstance(coalesce, bool):
        raise InvalidInput("coalesce", "must be true or false")
    if coalesce and ordering != KEYED:
        raise InvalidInput("coalesce", 'needs "ordering": "key": messages coalesce by their ordering key')
    overflow = body.get("backlog_overflow", base.backlog_overflow) or ""
    if overflow and overflow not in OVERFLOW_POLICIES:
        raise InvalidInput("backlog_overflow", f"must be one of {', '.join(OVERFLOW_POLICIES)}")
    return DeliveryOptions(
        ordering=ordering,
        concurrency=_one_of(body, "concurrency", base.concurrency, CONCURRENCY_MODES),
        delivery_control=_one_of(body, "delivery_control", base.delivery_control, CONTROL_MODES),
        heartbeat_interval=_none_or_in(body, "heartbeat_interval", base.heartbeat_interval,
                                       (MIN_HEARTBEAT, MAX_HEARTBEAT), "seconds", "none"),
        max_in_flight=max_in_flight,
        rate_limit=_none_or_in(body, "rate_limit", base.rate_limit, (MIN_RATE, MAX_RATE),
                               "events per second", "no limit"),
        batch_max=batch_max,
        batch_max_bytes=_whole(body, "batch_max_bytes", base.batch_max_bytes, 0, MAX_BATCH_BYTES),
        backlog_max=_whole(body, "backlog_max", base.backlog_max, 0, MAX_BACKLOG),
        backlog_max_bytes=_backlog_bytes(body, base.backlog_max_bytes),
        backlog_overflow=overflow,
        coalesce=coalesce,
    )


def _none_or_in(
    body: dict[str, Any], name: str, default: float, bounds: tuple[float, float], unit: str, none: str
) -> float:
    """A number in `bounds`, or 0.0 for none (0, or null)."""
    value = body.get(name, default)
    if value is None or (_is_number(value) and value == 0):
        return 0.0  # -0.0 too: stored as the plain "none"
    low, high = bounds
    if not _is_number(value) or not low <= value <= high:
        raise InvalidInput(name, f"must be {unit} in {low:g}..{high:g} (0 or null: {none})")
    return float(value)


def _one_of(body: dict[str, Any], name: str, default: str, choices: tuple[str, ...]) -> str:
    value = body.get(name, default)
    if value not in choices:
        raise InvalidInput(name, f"must be one of {', '.join(choices)}")
    return str(value)


def _backlog_bytes(body: dict[str, Any], default: int) -> int:
    value = _whole(body, "backlog_max_bytes", default, 0, MAX_BACKLOG_BYTES)
    if 0 < value < MIN_BACKLOG_BYTES:
        raise InvalidInput(
            "backlog_max_bytes",
            f"must be 0 (the worker's default) or {MIN_BACKLOG_BYTES}..{MAX_BACKLOG_BYTES}: "
            "a smaller cap dead-letters every message as it arrives",
        )
    return value


def _is_number(value: Any) -> bool:
    """A JSON number: bools are ints to Python but not numbers to a client; NaN is no number."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


def _whole(body: dict[str, Any], name: str, default: int, low: int, high: int) -> int:
    """An integer in low..high; bools (ints to Python) and floats (5.0, 1e300) are refused."""
    value = body.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidInput(name, f"must be a whole number in {low}..{high}")
    return value
