"""What `decide` reads besides the state and the command: the glue's facts now, and the policy."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Protocol

from ..aimd import AimdPolicy
from ..breaker import BreakerPolicy
from ..delivery_options import DEAD_LETTER_OLDEST, DeliveryOptions
from ..lanes import LanePolicy
from ..records import ReceiverConfig
from ..retry import RetryPolicy

DAY = 86400.0


class BacklogView(Protocol):
    """Read-only: one receiver's stored backlog entries, as far as the actor needs them.

    The glue answers from the table; an entry written by the current command
    (`PutBacklog`) is not there yet, and the actor knows that one itself.
    """

    def accepted_at(self, seq: int) -> float | None:
        """When the message stored under `seq` was accepted; None when there is no entry."""
        ...

    def size(self, seq: int) -> int:
        """The stored size in bytes of the entry under `seq`; 0 when there is none."""
        ...

    def key(self, seq: int) -> str:
        """The stored message's ordering key; "" for none, or no entry."""
        ...

    def latest(self, seq: int) -> int:
        """The newest stored seq with the ordering key of message `seq` (coalescing receivers keep an
        index of it: `PutLatest`); 0 when not known."""
        ...


class _NoBacklog:
    """A backlog with no entries (a receiver that has none, or a test that needs none)."""

    def accepted_at(self, seq: int) -> float | None:
        return None

    def size(self, seq: int) -> int:
        return 0

    def key(self, seq: int) -> str:
        return ""

    def latest(self, seq: int) -> int:
        return 0


NO_BACKLOG: BacklogView = _NoBacklog()


@dataclass(slots=True, frozen=True)
class Facts:
    """What the glue knows at this command that the state does not say."""

    now: float
    rand: float = 0.5  # uniform in [0, 1), for jitter
    in_flight: bool = False  # an attempt or probe of this receiver is running on this worker
    backlog: BacklogView = NO_BACKLOG  # the receiver's stored entries
    sending: frozenset[int] = frozenset()  # unordered: seqs whose attempts are running here


# Delivery options a receiver may leave to the worker, stored as 0 or "" so that a later change of
# the worker's setting reaches it; the policy's fields of the same names hold the defaults.
WORKER_DEFAULTED = ("batch_max_bytes", "backlog_max", "backlog_max_bytes", "backlog_overflow")


@dataclass(slots=True, frozen=True)
class Policy:
    """The worker's settings for every receiver; a receiver's own options and retry override some."""

    retry: RetryPolicy = field(default_factory=RetryPolicy)
    breaker: BreakerPolicy = field(default_factory=BreakerPolicy)
    dedup_window: float = DAY
    disable_after: float = 5 * DAY
    dead_letters_keep: int = 10_000
    max_expired_per_event: int = 200  # bounds one stream event's work; a wake continues
    lanes: LanePolicy = field(default_factory=LanePolicy)
    backlog_max: int = 1_000_000  # a receiver's own setting wins
    backlog_max_bytes: int = 1 << 30
    backlog_overflow: str = DEAD_LETTER_OLDEST
    batch_max_bytes: int = 1 << 20  # the deliverer applies it; here so views can show it
    retain: float = DAY  # settled messages stay readable (catch-up) this long; 0: deleted at once
    max_entry_bytes: int = 1 << 30  # a stored message larger than this could not reach the changelog
    aimd: AimdPolicy = field(default_factory=AimdPolicy)
    max_asked_pause: float = 3600.0  # the longest pause a receiver may ask for with webhook-delivery-control

    def backlog_caps(self, config: ReceiverConfig) -> tuple[int, int, str]:
        o = config.options
        return (
            o.backlog_max or self.backlog_max,
            o.backlog_max_bytes or self.backlog_max_bytes,
            o.backlog_overflow or self.backlog_overflow,
        )

    def effective_options(self, config: ReceiverConfig) -> DeliveryOptions:
        """The receiver's options with each one it left to the worker (0 or "") as the worker applies it."""
        o = config.options
        return replace(o, **{name: getattr(o, name) or getattr(self, name) for name in WORKER_DEFAULTED})

    def retry_for(self, config: ReceiverConfig) -> RetryPolicy:
        return self.retry.with_overrides(config.retry) if config.retry else self.retry
