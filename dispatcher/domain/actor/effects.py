"""The effects `decide` returns for the glue to run, in the order returned, and dead-letter reasons."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..lanes import Lane
from ..records import Message, Outcome


@dataclass(slots=True, frozen=True)
class PutBacklog:
    seq: int
    message: Message
    encoded: bytes = field(default=b"", compare=False)  # as stored; its length counts toward the cap


@dataclass(slots=True, frozen=True)
class RememberId:
    msg_id: str
    seq: int
    expires_at: float


@dataclass(slots=True, frozen=True)
class RememberFiltered:
    """A direct message the receiver's filter refused: its id is remembered (status `filtered`), no seq."""

    msg_id: str
    expires_at: float


@dataclass(slots=True, frozen=True)
class MarkCancelled:
    """The receiver's transform cancelled message `seq`: its dedup entry says so (status `cancelled`)."""

    msg_id: str
    seq: int


@dataclass(slots=True, frozen=True)
class SaveState:
    pass


@dataclass(slots=True, frozen=True)
class DeleteBacklog:
    seq: int
    superseded_by: int = 0  # coalescing: settled unsent, a newer message of its key (this seq) goes instead


@dataclass(slots=True, frozen=True)
class PutLatest:
    """Coalescing: message `seq` is the newest of its ordering `key` (the index `latest` reads)."""

    key: str
    seq: int


@dataclass(slots=True, frozen=True)
class DropLatest:
    """Coalescing: message `seq` of `key` is settled; the index forgets the key if it was the newest."""

    key: str
    seq: int


@dataclass(slots=True, frozen=True)
class Deliver:
    """POST the head (and, batching, up to `count` messages from it) through `lane`.

    `parallel`: one of an unordered receiver's attempts, running beside the others.
    """

    seq: int
    attempt: int
    count: int = 1
    lane: Lane = Lane.FAST
    parallel: bool = False


@dataclass(slots=True, frozen=True)
class Probe:
    """POST a `webhook.ping` (no seq) to learn whether an open circuit may close."""

    number: int


@dataclass(slots=True, frozen=True)
class Heartbeat:
    """POST a `webhook.heartbeat` (no seq) carrying `last_seq`, the highest seq delivered or dead-lettered."""

    number: int
    last_seq: int


@dataclass(slots=True, frozen=True)
class DeadLetter:
    """A record that never got a seq (unknown receiver, unreadable record)."""

    reason: str
    msg_id: str
    seq: int | None = None
    detail: str = ""
    message: Message | None = field(default=None, compare=False)  # its content goes with it


@dataclass(slots=True, frozen=True)
class DeadLetterHead:
    """The head message will not be delivered: record it (table and topic) before skipping it."""

    seq: int
    reason: str
    detail: str
    attempts: int
    last_status: int | None
    last_error: str | None


@dataclass(slots=True, frozen=True)
class TrimDeadLetters:
    """Keep only the newest `keep` dead letters of this receiver: the oldest `excess` go.

    Naming the count keeps the work per expiry at `excess` entries, not a scan
    of all `keep` (a receiver with 10,000 dead letters expiring its backlog).
    """

    keep: int
    excess: int = 1


@dataclass(slots=True, frozen=True)
class LogAttempt:
    number: int  # position in the receiver's attempt log
    attempt: int  # attempt of this message (0 for probes)
    kind: str  # "message", "probe", "ping" or "heartbeat"
    outcome: Outcome
    control: str = ""  # what the answer's webhook-delivery-control header did, if it had one


@dataclass(slots=True, frozen=True)
class Subscribe:
    """Publish the receiver's event types and tenant to every worker's subscription index.

    Sent on every configure, not only on a change: re-applying a configure after a
    crash must publish again in case the first publish was lost with the worker.
    """


@dataclass(slots=True, frozen=True)
class Unsubscribe:
    """Remove the receiver from every worker's subscription index (it is deleted)."""


@dataclass(slots=True, frozen=True)
class ForgetHistory:
    """Delete the receiver's attempt log and kept settled messages (its state is being reset).

    Not its dead letters: a settled message without one would read as delivered."""


@dataclass(slots=True, frozen=True)
class Forget:
    """Delete what the table holds about the receiver (its backlog is empty by now), a bounded
    number of entries at a time, its state last; a wake goes on until it is gone."""


@dataclass(slots=True, frozen=True)
class MovedLane:
    """The receiver changed lanes (logged, with the figures that moved it)."""

    lane: Lane
    p90_ms: float | None
    timeouts_in_row: int


@dataclass(slots=True, frozen=True)
class Ignored:
    """Nothing to do; logged at debug with the reason."""

    reason: str
    msg_id: str = ""
    seq: int | None = None


Effect = (
    PutBacklog | RememberId | RememberFiltered | MarkCancelled | SaveState
    | DeleteBacklog | Deliver | Probe | Heartbeat | DeadLetter
    | DeadLetterHead | TrimDeadLetters | LogAttempt | MovedLane | Subscribe | Unsubscribe | Forget
    | ForgetHistory | Ignored | PutLatest | DropLatest
)


# Reasons a message is dead-lettered
MAX_AGE = "max_age"
MAX_ATTEMPTS = "max_attempts"
PERMANENT_STATUS = "permanent_status"
MISSING_ENTRY = "missing_entry"
UNKNOWN_RECEIVER = "unknown_receiver"
BACKLOG_FULL = "backlog_full"
RECEIVER_DELETED = "receiver_deleted"
STATE_RESET = "state_reset"
TOO_LARGE = "too_large"
BEFORE_CREATION = "accepted_before_creation"
TRANSFORM_ERROR = "transform_error"  # the receiver's transform failed on the message (kept for a replay)
