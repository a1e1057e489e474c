"""A receiver's durable state, `ReceiverState`, and its bytes in the actor table.

The bytes are orjson of the fields in declaration order, nested records as
objects: a state written by any earlier version decodes, and fields a newer
version wrote are dropped on decoding.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

import orjson

from ..aimd import Congestion, effective
from ..breaker import Breaker, Circuit
from ..delivery_control import Asked
from ..lanes import Health, Lane
from ..plain import plain
from ..ratelimit import Bucket
from ..records import ReceiverConfig
from ..window import Slot


class DerivedState:
    """What a receiver's state and its draft (`StateDraft`) derive alike from their fields."""

    __slots__ = ()

    if TYPE_CHECKING:  # fields of the dataclasses that derive from this one
        @property
        def config(self) -> ReceiverConfig: ...
        @property
        def next_seq(self) -> int: ...
        @property
        def delivered_seq(self) -> int: ...
        @property
        def cursor(self) -> int: ...
        @property
        def window(self) -> tuple[Slot, ...]: ...
        @property
        def paused(self) -> bool: ...
        @property
        def disabled(self) -> bool: ...
        @property
        def deleting(self) -> bool: ...
        @property
        def resetting(self) -> bool: ...
        @property
        def congestion(self) -> Congestion: ...
        @property
        def asked(self) -> Asked: ...

    @property
    def head(self) -> int | None:
        """Seq of the oldest undelivered message, or None when the backlog is empty."""
        head = self.delivered_seq + 1
        return head if head < self.next_seq else None

    @property
    def backlog(self) -> int:
        """Messages not yet settled (unordered: the window and those not started)."""
        if self.cursor:
            return self.next_seq - self.cursor + len(self.window)
        return self.next_seq - 1 - self.delivered_seq

    @property
    def held(self) -> bool:
        """Delivery is held by hand (pause), by failures (disabled) or until the URL is verified."""
        return self.paused or self.disabled or self.purging or not self.config.verified

    @property
    def in_flight_limit(self) -> int:
        """How many of an unordered receiver's messages may be out now: its adaptive window (or
        max_in_flight, when fixed), capped by what the receiver asked for."""
        o = self.config.options
        return effective(self.congestion, o.max_in_flight, self.asked.max_in_flight, o.concurrency)

    @property
    def purging(self) -> bool:
        """Being deleted or reset: its messages are dead-lettered, none is sent."""
        return self.deleting or self.resetting


@dataclass(slots=True, frozen=True)
class ReceiverState(DerivedState):
    """Everything durable about one receiver except its buffered messages."""

    receiver_id: str
    config: ReceiverConfig
    next_seq: int = 1
    delivered_seq: int = 0
    attempts: int = 0  # failed attempts of the head
    next_attempt_at: float = 0.0
    head_accepted_at: float = 0.0  # 0 = not known yet (looked up from the backlog)
    breaker: Breaker = field(default_factory=Breaker)
    failing_since: float = 0.0  # first failure since the last 2xx; 0 = healthy
    paused: bool = False
    disabled: bool = False
    disabled_reason: str = ""
    active_since: float = 0.0  # age of parked messages counts from here after enable/resume
    delivered: int = 0
    failed_attempts: int = 0
    dead_lettered: int = 0
    dead_letters_kept: int = 0
    attempt_no: int = 0  # attempts logged so far (probes included)
    last_status: int | None = None
    last_error: str | None = None
    last_attempt_at: float = 0.0
    dedup_sweep_at: float = 0.0  # earliest dedup entry expiry; 0 = none pending
    retain_sweep_at: float = 0.0  # earliest expiry of a settled message kept for catch-up; 0 = none
    health: Health = field(default_factory=Health)  # recent answer times and the lane they earned
    backlog_bytes: int = 0  # stored size of the buffered messages
    bucket: Bucket = field(default_factory=Bucket)  # the receiver's rate limit, if it has one
    window: tuple[Slot, ...] = ()  # unordered: messages started and not yet settled
    cursor: int = 0  # unordered: the next seq to start; 0 = delivering in order
    deleting: bool = False  # deleted through the API: its backlog is being dead-lettered
    resetting: bool = False  # reset through the API: likewise, then it starts afresh
    congestion: Congestion = field(default_factory=Congestion)  # unordered: the adaptive in-flight window
    asked: Asked = field(default_factory=Asked)  # what the receiver asked with webhook-delivery-control
    heartbeat_at: float = 0.0  # when the last webhook.heartbeat went; 0 = none yet
    heartbeats: int = 0  # heartbeats sent so far (an answer names its number)
    heartbeats_answered: int = 0  # the number of the last heartbeat whose answer was applied

    def to_bytes(self) -> bytes:
        data = _plain_state(self)
        # Untouched, these two are their defaults: left out, as from a state written before them,
        # so a receiver that never adapts nor was steered writes no more than it did (every save).
        if not self.congestion.window:  # the first answer that moves it sets a window of 1 or more
            del data["congestion"]
        if not self.asked.at:  # set by every answer that used the header
            del data["asked"]
        return orjson.dumps(data)

    __bytes__ = to_bytes  # the table writer encodes a state only if it is sent

    @classmethod
    def from_bytes(cls, raw: bytes) -> ReceiverState:
        data = orjson.loads(raw)
        if not _STATE_FIELDS.issuperset(data):  # fields of a newer version: dropped
            data = {k: v for k, v in data.items() if k in _STATE_FIELDS}
        data["config"] = ReceiverConfig.from_dict(data["config"])
        if "breaker" in data:
            b = data["breaker"]
            data["breaker"] = Breaker(**{**b, "circuit": Circuit(b["circuit"])})
        if "health" in data:
            h = data["health"]
            data["health"] = Health(**{**h, "lane": Lane(h["lane"]), "recent_ms": tuple(h["recent_ms"])})
        if "bucket" in data:
            data["bucket"] = Bucket(**data["bucket"])
        if "window" in data:
            data["window"] = tuple(Slot(**slot) for slot in data["window"])
        if "congestion" in data:
            data["congestion"] = Congestion(**data["congestion"])
        if "asked" in data:
            data["asked"] = Asked(**data["asked"])
        return cls(**data)


_STATE_FIELDS = {f.name for f in fields(ReceiverState)}
_plain_slot = plain(Slot)


def _plain_window(window: tuple[Slot, ...]) -> list[dict[str, Any]]:
    return [_plain_slot(slot) if slot.key else _keyless(slot) for slot in window]


def _keyless(slot: Slot) -> dict[str, Any]:
    """A slot without an ordering key, as written before keys: shorter, and read by that version."""
    plain = _plain_slot(slot)
    del plain["key"]
    return plain


_plain_state = plain(ReceiverState, {
    "config": ReceiverConfig.as_json,  # made once per config
    "breaker": plain(Breaker),
    "health": plain(Health),
    "bucket": plain(Bucket),
    "window": _plain_window,
    "congestion": plain(Congestion),
    "asked": plain(Asked),
})
