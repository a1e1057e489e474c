"""The receiver actor: pure state transitions.

`decide(state, command, now, ...)` returns the new state and the effects, in
the order the glue must run them. Seq numbers are contiguous per receiver; the
head message (delivered_seq + 1) is the only one ever posted for an ordered
receiver, so seq k+1 is never sent before seq k got a 2xx.

Effect order matters for crash safety: every write of one receiver goes to one
changelog partition in order, so a crash keeps a prefix. Backlog and dedup
entries are written before the state that refers to them, and a dedup entry
counts only when the saved state has moved past its seq.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

import orjson

from .backoff import Backoff
from .records import Message, Outcome, ReceiverConfig

BODY_PREFIX_KEEP = 1024


@dataclass(slots=True, frozen=True)
class ReceiverState:
    """Everything durable about one receiver except its buffered messages."""

    receiver_id: str
    config: ReceiverConfig
    next_seq: int = 1
    delivered_seq: int = 0
    attempts: int = 0
    next_attempt_at: float = 0.0
    delivered: int = 0
    failed_attempts: int = 0
    dead_lettered: int = 0
    last_response: dict[str, Any] | None = None

    @property
    def head(self) -> int | None:
        """Seq of the oldest undelivered message, or None when the backlog is empty."""
        head = self.delivered_seq + 1
        return head if head < self.next_seq else None

    @property
    def backlog(self) -> int:
        return self.next_seq - 1 - self.delivered_seq

    def to_bytes(self) -> bytes:
        data = asdict(self)
        data["config"] = self.config.as_dict()
        return orjson.dumps(data)

    @classmethod
    def from_bytes(cls, raw: bytes) -> ReceiverState:
        data = orjson.loads(raw)
        data["config"] = ReceiverConfig.from_dict(data["config"])
        return cls(**data)


# Commands -------------------------------------------------------------------


@dataclass(slots=True, frozen=True)
class Intake:
    """A message arrived; `seen_seq` is the seq its id was given before, if any."""

    message: Message
    seen_seq: int | None = None


@dataclass(slots=True, frozen=True)
class Configure:
    config: ReceiverConfig


@dataclass(slots=True, frozen=True)
class Result:
    outcome: Outcome


@dataclass(slots=True, frozen=True)
class Wake:
    """A timer fired (retry due) or the partition was just assigned."""


Command = Intake | Configure | Result | Wake


# Effects --------------------------------------------------------------------


@dataclass(slots=True, frozen=True)
class PutBacklog:
    seq: int
    message: Message


@dataclass(slots=True, frozen=True)
class RememberId:
    msg_id: str
    seq: int
    expires_at: float


@dataclass(slots=True, frozen=True)
class SaveState:
    pass


@dataclass(slots=True, frozen=True)
class DeleteBacklog:
    seq: int


@dataclass(slots=True, frozen=True)
class Deliver:
    seq: int
    attempt: int


@dataclass(slots=True, frozen=True)
class ScheduleWake:
    at: float


@dataclass(slots=True, frozen=True)
class DeadLetter:
    reason: str
    msg_id: str
    seq: int | None = None
    detail: str = ""


@dataclass(slots=True, frozen=True)
class Ignored:
    """Nothing to do; logged at debug with the reason."""

    reason: str
    msg_id: str = ""
    seq: int | None = None


Effect = (
    PutBacklog | RememberId | SaveState | DeleteBacklog | Deliver | ScheduleWake | DeadLetter | Ignored
)


@dataclass(slots=True, frozen=True)
class Policy:
    backoff: Backoff = field(default_factory=Backoff)
    dedup_window: float = 24 * 3600.0


def decide(
    state: ReceiverState | None,
    command: Command,
    now: float,
    policy: Policy,
    rand: float = 0.5,
) -> tuple[ReceiverState | None, list[Effect]]:
    """Apply one command to one receiver's state."""
    if isinstance(command, Configure):
        return _configure(state, command.config, now)
    if state is None:
        return _unknown_receiver(command)
    if isinstance(command, Intake):
        return _intake(state, command, now, policy)
    if isinstance(command, Result):
        return _result(state, command.outcome, now, policy, rand)
    return state, _deliver_if_due(state, now)


def _configure(
    state: ReceiverState | None, config: ReceiverConfig, now: float
) -> tuple[ReceiverState, list[Effect]]:
    if state is None:
        return ReceiverState(config.id, config), [SaveState()]
    new = replace(state, config=config)
    return new, [SaveState(), *_deliver_if_due(new, now)]


def _unknown_receiver(command: Command) -> tuple[None, list[Effect]]:
    if isinstance(command, Intake):
        msg = command.message
        return None, [DeadLetter("unknown_receiver", msg.id, None, "no such receiver")]
    return None, [Ignored("no such receiver")]


def _intake(
    state: ReceiverState, command: Intake, now: float, policy: Policy
) -> tuple[ReceiverState, list[Effect]]:
    msg = command.message
    if command.seen_seq is not None and command.seen_seq < state.next_seq:
        return state, [Ignored("duplicate message id", msg.id, command.seen_seq)]
    seq = state.next_seq
    new = replace(state, next_seq=seq + 1)
    effects: list[Effect] = [
        PutBacklog(seq, msg),
        RememberId(msg.id, seq, now + policy.dedup_window),
        SaveState(),
    ]
    if new.head == seq:
        effects += _deliver_if_due(new, now)
    return new, effects


def _result(
    state: ReceiverState, outcome: Outcome, now: float, policy: Policy, rand: float
) -> tuple[ReceiverState, list[Effect]]:
    if outcome.seq != state.head:
        # A late or duplicate outcome (e.g. from a worker that lost the partition).
        # The head may be idle now that this attempt is over; the glue's
        # one-in-flight guard drops the Deliver if the head is still being posted.
        stale: list[Effect] = [Ignored("stale outcome", outcome.msg_id, outcome.seq)]
        return state, stale + _deliver_if_due(state, now)
    response = _response_summary(outcome)
    if outcome.ok:
        new = replace(
            state,
            delivered_seq=outcome.seq,
            attempts=0,
            next_attempt_at=0.0,
            delivered=state.delivered + 1,
            last_response=response,
        )
        return new, [SaveState(), DeleteBacklog(outcome.seq), *_deliver_if_due(new, now)]
    attempts = state.attempts + 1
    due = now + policy.backoff.delay(attempts, rand)
    new = replace(
        state,
        attempts=attempts,
        next_attempt_at=due,
        failed_attempts=state.failed_attempts + 1,
        last_response=response,
    )
    return new, [SaveState(), ScheduleWake(due)]


def _deliver_if_due(state: ReceiverState, now: float) -> list[Effect]:
    head = state.head
    if head is None:
        return []
    if state.next_attempt_at > now:
        return [ScheduleWake(state.next_attempt_at)]
    return [Deliver(head, state.attempts + 1)]


def _response_summary(outcome: Outcome) -> dict[str, Any]:
    return {
        "seq": outcome.seq,
        "msg_id": outcome.msg_id,
        "ok": outcome.ok,
        "status": outcome.status,
        "error": outcome.error,
        "latency_ms": round(outcome.latency_ms, 3),
        "at": outcome.at,
        "headers": outcome.headers,
        "body_prefix": outcome.body_prefix[:BODY_PREFIX_KEEP],
    }
