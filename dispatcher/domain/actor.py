"""The receiver actor: pure state transitions.

`decide(state, command, facts, policy)` returns the new state and the effects,
in the order the glue must run them. Seq numbers are contiguous per receiver.
For an ordered receiver the head message (delivered_seq + 1) is the only one
ever posted, so seq k+1 is never sent before seq k got a 2xx or was
dead-lettered. An unordered receiver (`ordering: "none"`) has a window of up
to `max_in_flight` messages out at once, each retried on its own
(`window.py`); delivered_seq is then the seq below which all are settled.

Effect order matters for crash safety: every write of one receiver goes to one
changelog partition in order, so a crash keeps a prefix. Backlog and dedup
entries are written before the state that refers to them, dead letters before
the state that skips them, and a dedup entry counts only when the saved state
has moved past its seq.

Every timer is derived from the state (`next_wake`), so the glue's timer wheel
can be rebuilt from the table after a crash or a rebalance.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields
from typing import Any

import orjson

from .breaker import Breaker, BreakerPolicy, Circuit
from .delivery_options import DEAD_LETTER_OLDEST, REJECT
from .evolve import evolve
from .lanes import Health, Lane, LanePolicy
from .plain import plain
from .ratelimit import Bucket, burst_of
from .records import Message, Outcome, ReceiverConfig, encode_backlog_entry
from .retry import RetryPolicy, Verdict, parse_retry_after
from .untrusted import safe_outcome
from .window import Slot, find, floor, replaced, without

_set_field = object.__setattr__  # only on a _Step's own copy of a state
BODY_PREFIX_KEEP = 1024
CREATION_SKEW = 10.0  # seconds of clock difference between workers a message's acceptance may show
DAY = 86400.0


@dataclass(slots=True, frozen=True)
class ReceiverState:
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
    def purging(self) -> bool:
        """Being deleted or reset: its messages are dead-lettered, none is sent."""
        return self.deleting or self.resetting

    def to_bytes(self) -> bytes:
        return orjson.dumps(_plain_state(self))

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
        return cls(**data)


_STATE_FIELDS = {f.name for f in fields(ReceiverState)}
_plain_slot = plain(Slot)
_plain_state = plain(ReceiverState, {
    "config": ReceiverConfig.as_json,  # made once per config
    "breaker": plain(Breaker),
    "health": plain(Health),
    "bucket": plain(Bucket),
    "window": lambda window: [_plain_slot(slot) for slot in window],
})


# Facts the glue knows and the actor needs ----------------------------------------


def _no_backlog(seq: int) -> float | None:
    return None


def _no_size(seq: int) -> int:
    return 0


@dataclass(slots=True, frozen=True)
class Facts:
    now: float
    rand: float = 0.5  # uniform in [0, 1), for jitter
    in_flight: bool = False  # an attempt or probe of this receiver is running on this worker
    accepted_at: Callable[[int], float | None] = _no_backlog  # backlog lookup; None = missing
    entry_size: Callable[[int], int] = _no_size  # stored size of a backlog entry (0 if missing)
    sending: frozenset[int] = frozenset()  # unordered: seqs whose attempts are running here


@dataclass(slots=True, frozen=True)
class Policy:
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
    retain: float = DAY  # settled messages stay readable (catch-up) this long; 0: deleted at once
    max_entry_bytes: int = 1 << 30  # a stored message larger than this could not reach the changelog

    def backlog_caps(self, config: ReceiverConfig) -> tuple[int, int, str]:
        o = config.options
        return (
            o.backlog_max or self.backlog_max,
            o.backlog_max_bytes or self.backlog_max_bytes,
            o.backlog_overflow or self.backlog_overflow,
        )

    def retry_for(self, config: ReceiverConfig) -> RetryPolicy:
        return self.retry.with_overrides(config.retry) if config.retry else self.retry


# Commands -------------------------------------------------------------------


@dataclass(slots=True, frozen=True)
class Intake:
    """A message arrived; `seen_seq` is the seq its id was given before, if any."""

    message: Message
    seen_seq: int | None = None


@dataclass(slots=True, frozen=True)
class Configure:
    config: ReceiverConfig
    if_absent: bool = False  # a create: ignored when another receiver has the id (two creates raced)


@dataclass(slots=True, frozen=True)
class Result:
    outcome: Outcome


@dataclass(slots=True, frozen=True)
class Wake:
    """A timer fired; `*_next` are set when the glue just swept expired entries (0: none left)."""

    dedup_next: float | None = None
    retain_next: float | None = None


@dataclass(slots=True, frozen=True)
class Control:
    """`pause`, `resume`, `enable` or `disable`, by hand through the API."""

    action: str
    reason: str = ""


Command = Intake | Configure | Result | Wake | Control


# Effects --------------------------------------------------------------------


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
class SaveState:
    pass


@dataclass(slots=True, frozen=True)
class DeleteBacklog:
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
    kind: str  # "message", "probe" or "ping"
    outcome: Outcome


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
    """Delete the receiver's attempt log and dead letters (its state was reset)."""


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
    PutBacklog | RememberId | SaveState | DeleteBacklog | Deliver | Probe | DeadLetter | DeadLetterHead
    | TrimDeadLetters | LogAttempt | MovedLane | Subscribe | Unsubscribe | Forget | ForgetHistory | Ignored
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


def decide(
    state: ReceiverState | None, command: Command, facts: Facts, policy: Policy
) -> tuple[ReceiverState | None, list[Effect]]:
    """Apply one command to one receiver's state."""
    if isinstance(command, Configure):
        if command.if_absent and state is not None and state.config != command.config:
            return state, [Ignored("a receiver with this id exists: a create does not replace it")]
        if state is not None and state.purging:
            return state, [Ignored("receiver is being deleted or reset; configure it once that is done")]
        return _configure(state, command.config, facts, policy)
    if state is None:
        return _unknown_receiver(command)
    step = _Step(state, facts, policy)
    if isinstance(command, Intake):
        step.intake(command)
    elif isinstance(command, Result):
        step.result(safe_outcome(command.outcome, facts.now))  # every value a receiver shaped, bounded
    elif isinstance(command, Control):
        step.control(command)
    else:
        step.wake(command)
    if step.state.purging:
        step.purge()
        if step.state.backlog == 0 and step.state.deleting:
            # Nothing left to dead-letter: its entries go, a bounded number per command (the glue
            # deletes the state last, once the rest is gone); until then it reads as deleting.
            step.actions += [Unsubscribe(), Forget()]
        elif step.state.backlog == 0:
            step.start_afresh()
    return step.finish()


def next_wake(
    state: ReceiverState, policy: Policy, in_flight: bool, sending: frozenset[int] = frozenset()
) -> float | None:
    """When this receiver next needs the actor, or None; derived from the state alone."""
    times = [t for t in (state.dedup_sweep_at, state.retain_sweep_at) if t]
    if state.purging:
        times.append(0.0)  # its backlog is dead-lettered a bounded number at a time: go on now
    elif state.cursor:
        times += _window_wakes(state, policy, in_flight and not sending, sending)
    elif state.head is not None and not state.held and not in_flight:
        if state.breaker.circuit is Circuit.OPEN:
            times.append(state.breaker.probe_at)
        else:
            times.append(state.next_attempt_at)
        if state.head_accepted_at:
            times.append(expires_at(state, policy.retry_for(state.config)))
    return min(times) if times else None


def _window_wakes(state: ReceiverState, policy: Policy, solo: bool, sending: frozenset[int]) -> list[float]:
    """An unordered receiver's due times: retries and expiries of its idle slots, room to start more."""
    if state.held or solo:
        return []
    retry = policy.retry_for(state.config)
    idle = [slot for slot in state.window if slot.seq not in sending]
    times = [slot_expires_at(state, slot, retry) for slot in idle]
    circuit = state.breaker.circuit
    if circuit is Circuit.OPEN:
        return times if sending else [*times, state.breaker.probe_at]
    if circuit is Circuit.CLOSED or not sending:
        times += [slot.next_attempt_at for slot in idle]
        room = len(state.window) < state.config.options.max_in_flight
        if room and state.cursor < state.next_seq:
            times.append(state.next_attempt_at)  # the rate limit's gate (0: now)
    return times


def slot_expires_at(state: ReceiverState, slot: Slot, retry: RetryPolicy) -> float:
    return max(slot.accepted_at, state.active_since) + retry.max_age


def refuses_new(state: ReceiverState, policy: Policy, size: int) -> bool:
    """A `reject` receiver's backlog has no room for one more message of `size` stored bytes."""
    max_count, max_bytes, overflow = policy.backlog_caps(state.config)
    return overflow == REJECT and (state.backlog >= max_count or state.backlog_bytes + size > max_bytes)


def expires_at(state: ReceiverState, retry: RetryPolicy) -> float:
    """When the head passes max_age (the age of parked messages restarts at enable/resume)."""
    return max(state.head_accepted_at, state.active_since) + retry.max_age


def _configure(
    state: ReceiverState | None, config: ReceiverConfig, facts: Facts, policy: Policy
) -> tuple[ReceiverState, list[Effect]]:
    if state is None:
        return ReceiverState(config.id, config, active_since=facts.now), [SaveState(), Subscribe()]
    step = _Step(state, facts, policy)
    step.update(config=config)
    step.actions.append(Subscribe())
    if config.verified and not state.config.verified:
        step.update(active_since=facts.now)  # held messages age from activation, as after resume
    step.advance()
    return step.finish()


def _unknown_receiver(command: Command) -> tuple[None, list[Effect]]:
    if isinstance(command, Intake):
        msg = command.message
        return None, [DeadLetter(UNKNOWN_RECEIVER, msg.id, None, "no such receiver", msg)]
    return None, [Ignored("no such receiver")]


class _Step:
    """One command's work on one receiver: the evolving state and the effects so far.

    `finish` orders the effects for crash safety: records the new state refers
    to (backlog, dedup, dead letters, attempt log), then the state, then
    deletions of what the state no longer refers to, then I/O.
    """

    def __init__(self, state: ReceiverState, facts: Facts, policy: Policy) -> None:
        # A private copy, changed in place: one copy per command instead of one per read
        # after an update. Frozen to everyone else; the caller's state is never touched.
        self.state = evolve(state)
        self.facts = facts
        self.policy = policy
        self.retry = policy.retry_for(state.config)
        self.in_flight = facts.in_flight
        self.sending = set(facts.sending)
        self.fresh: dict[int, tuple[float, int]] = {}  # seq -> (accepted at, size) stored by this step
        self.dirty = False
        self.writes: list[Effect] = []
        self.deletes: list[Effect] = []
        self.actions: list[Effect] = []

    @property
    def now(self) -> float:
        return self.facts.now

    def update(self, **changes: Any) -> None:
        """Set fields of this step's state (an outcome makes about six updates)."""
        state = self.state
        for name, value in changes.items():
            if getattr(state, name) != value:
                _set_field(state, name, value)
                self.dirty = True

    def finish(self) -> tuple[ReceiverState, list[Effect]]:
        save: list[Effect] = [SaveState()] if self.dirty else []
        return self.state, [*self.writes, *save, *self.deletes, *self.actions]

    # commands ---------------------------------------------------------------

    def intake(self, command: Intake) -> None:
        msg, state = command.message, self.state
        if state.purging:
            reason, why = (RECEIVER_DELETED, "deleted") if state.deleting else (STATE_RESET, "reset")
            self.actions.append(DeadLetter(reason, msg.id, None, f"the receiver is being {why}", msg))
            return
        if command.seen_seq is not None and command.seen_seq < state.next_seq:
            self.actions.append(Ignored("duplicate message id", msg.id, command.seen_seq))
            return
        if msg.from_event and msg.accepted_at < state.config.created_at:
            # Fan-out matched a newer index than the event's (a backlog of events, or an id
            # deleted and created again): a receiver gets the events accepted after its creation.
            self.actions.append(Ignored("event accepted before the receiver was created", msg.id))
            return
        if msg.accepted_at < state.config.created_at - CREATION_SKEW:
            # Configuration travels apart from messages, so one accepted for a receiver since
            # deleted may be read after the id was created again: it was never this one's. (A
            # receiver gets what was accepted after its creation, as it does for events.)
            why = (f"accepted {state.config.created_at - msg.accepted_at:.0f} s before this receiver was "
                   "created (its id deleted and created again, or an accepted_at from before it)")
            self.actions.append(DeadLetter(BEFORE_CREATION, msg.id, None, why, msg))
            return
        seq = state.next_seq
        encoded = encode_backlog_entry(msg, seq)
        if len(encoded) > self.policy.max_entry_bytes:
            limit = self.policy.max_entry_bytes
            detail = f"stored it would take {len(encoded)} bytes, over the {limit} a record may hold"
            self.actions.append(DeadLetter(TOO_LARGE, msg.id, None, detail, msg))
            return
        if refuses_new(state, self.policy, len(encoded)):
            detail = f"backlog full ({state.backlog} messages, {state.backlog_bytes} bytes): refused"
            self.actions.append(DeadLetter(BACKLOG_FULL, msg.id, None, detail, msg))
            return
        self.update(
            next_seq=seq + 1,
            dedup_sweep_at=state.dedup_sweep_at or self.now + self.policy.dedup_window,
            backlog_bytes=state.backlog_bytes + len(encoded),
        )
        self.writes += [
            PutBacklog(seq, msg, encoded),
            RememberId(msg.id, seq, self.now + self.policy.dedup_window),
        ]
        self.fresh[seq] = (msg.accepted_at or self.now, len(encoded))
        if self.state.cursor or not self.state.config.options.ordered:
            self.advance()
        elif self.state.head == seq:
            self.update(head_accepted_at=msg.accepted_at or self.now, attempts=0, next_attempt_at=0.0)
            self.advance()
        else:
            self._drop_overflow()

    def result(self, outcome: Outcome) -> None:
        if outcome.probe:
            self._probe_result(outcome)
        elif self.state.cursor:
            self._window_result(outcome)
        elif outcome.seq != self.state.head or outcome.attempt != self.state.attempts + 1:
            # A late or duplicate outcome: from a worker that lost the partition, or
            # replayed from the commands topic after a crash (its effect is in the state).
            self.actions.append(Ignored("stale outcome", outcome.msg_id, outcome.seq))
            self.advance()
        else:
            self._attempt_result(outcome)

    def wake(self, command: Wake) -> None:
        if command.dedup_next is not None:
            self.update(dedup_sweep_at=command.dedup_next)
        if command.retain_next is not None:
            self.update(retain_sweep_at=command.retain_next)
        self.advance()

    def control(self, command: Control) -> None:
        action = command.action
        if action == "pause":
            self.update(paused=True)
        elif action == "resume":
            self.update(paused=False, active_since=self.now)
        elif action == "disable":
            self.update(disabled=True, disabled_reason=command.reason or "disabled through the API")
        elif action == "delete":
            self.update(deleting=True)
        elif action == "reset":
            self.update(resetting=not self.state.deleting)
        elif action == "enable":
            self.update(
                disabled=False, disabled_reason="", breaker=Breaker(), failing_since=0.0,
                attempts=0, next_attempt_at=0.0, active_since=self.now,
            )
        else:
            self.actions.append(Ignored(f"unknown control action {action!r}"))
            return
        self.advance()

    # results ------------------------------------------------------------------

    def _log(self, outcome: Outcome, attempt: int, kind: str) -> None:
        number = self.state.attempt_no + 1
        self.update(
            attempt_no=number,
            last_status=outcome.status,
            last_error=outcome.error,
            last_attempt_at=outcome.at,
        )
        self.writes.append(LogAttempt(number, attempt, kind, outcome))

    def _attempt_result(self, outcome: Outcome) -> None:
        state = self.state
        verdict = self.retry.classify(outcome.status)
        ok = verdict is Verdict.SUCCESS
        last = max(outcome.seq, outcome.last)  # a batch covers seq..last
        self._log(outcome, state.attempts + 1, "message")
        self.update(breaker=state.breaker.record(ok, self.now, self.policy.breaker))
        self._observe_lane(outcome)
        if ok:
            self.update(failing_since=0.0, delivered=state.delivered + 1 + last - outcome.seq)
            self._settle_head(last)
            self.advance()
            return
        attempts = state.attempts + 1
        self.update(
            attempts=attempts,
            failed_attempts=state.failed_attempts + 1,
            failing_since=state.failing_since or self.now,
        )
        detail = _describe(outcome)
        if verdict is Verdict.GONE:
            self.update(disabled=True, disabled_reason=f"receiver answered 410 Gone (seq {outcome.seq})")
        elif verdict is Verdict.PERMANENT:
            self._dead_letter_head(PERMANENT_STATUS, f"{detail}, not retryable", last)
        elif attempts >= self.retry.max_attempts:
            self._dead_letter_head(MAX_ATTEMPTS, f"{detail}, {attempts} attempts", last)
        else:
            retry_after = None
            if outcome.status in (429, 503):
                retry_after = parse_retry_after(outcome.headers.get("retry-after"), self.now)
            delay = self.retry.next_delay(attempts, self.facts.rand, retry_after)
            self.update(next_attempt_at=self.now + delay)
        self._maybe_disable()
        self.advance()

    def _probe_result(self, outcome: Outcome) -> None:
        before = self.state.breaker
        number = 0 if outcome.manual else outcome.attempt
        if number and not before.fresh_probe(number):
            self.actions.append(Ignored("stale probe result", outcome.msg_id))
            self.advance()
            return
        self._log(outcome, number, "ping" if outcome.manual else "probe")
        breaker = before.probe_result(outcome.ok, self.now, self.policy.breaker, number)
        if before.circuit is Circuit.OPEN and breaker.circuit is Circuit.HALF_OPEN:
            # the head (unordered: one message of the window) goes out now, once
            window = tuple(evolve(slot, next_attempt_at=0.0) for slot in self.state.window)
            self.update(next_attempt_at=0.0, window=window)
        self.update(breaker=breaker)
        if not outcome.ok and not outcome.manual and self.state.head is not None:
            self.update(failing_since=self.state.failing_since or self.now)
            self._maybe_disable()
        self.advance()

    def _observe_lane(self, outcome: Outcome) -> None:
        before = self.state.health
        timed_out = outcome.status is None and outcome.error == "timeout"
        health = before.observe(outcome.latency_ms, outcome.status is not None, timed_out, self.now,
                                self.policy.lanes)
        self.update(health=health)
        if health.lane is not before.lane:
            self.actions.append(MovedLane(health.lane, before.p90(), before.timeouts_in_row + timed_out))

    def _maybe_disable(self) -> None:
        since = self.state.failing_since
        if not self.state.disabled and since and self.now - since >= self.policy.disable_after:
            days = (self.now - since) / DAY
            self.update(disabled=True, disabled_reason=f"failing for {days:.1f} days")

    # the head -----------------------------------------------------------------

    def _settle_head(self, last: int) -> None:
        """The head (through `last`, for a batch) got a 2xx or was dead-lettered; the next becomes head."""
        first = self.state.delivered_seq + 1
        size = sum(self.facts.entry_size(seq) for seq in range(first, last + 1))
        self.update(
            delivered_seq=last, attempts=0, next_attempt_at=0.0, head_accepted_at=0.0,
            backlog_bytes=max(0, self.state.backlog_bytes - size),
        )
        self._retire(range(first, last + 1))
        head = self.state.head
        if head is not None:
            self.update(head_accepted_at=self.facts.accepted_at(head) or 0.0)

    def _dead_letter_head(self, reason: str, detail: str, last: int = 0) -> None:
        """Dead-letter the head, or the head through `last` (a batch), then move past them."""
        state = self.state
        first = state.head
        assert first is not None
        last = max(first, last)
        tried = state.attempts > 0  # else the last status belongs to another message or a probe
        self.writes += [
            DeadLetterHead(
                seq, reason, detail, state.attempts,
                state.last_status if tried else None, state.last_error if tried else None,
            )
            for seq in range(first, last + 1)
        ]
        self._count_dead_letters(last - first + 1)
        self._settle_head(last)

    def _count_dead_letters(self, added: int) -> None:
        """Count dead letters just written; past the number kept, the oldest go (after them)."""
        keep = self.policy.dead_letters_keep
        kept = self.state.dead_letters_kept + added
        if kept > keep:
            self.writes.append(TrimDeadLetters(keep, kept - keep))
        self.update(dead_lettered=self.state.dead_lettered + added, dead_letters_kept=min(kept, keep))

    def _over_cap(self) -> bool:
        max_count, max_bytes, overflow = self.policy.backlog_caps(self.state.config)
        state = self.state
        return overflow == DEAD_LETTER_OLDEST and (
            state.backlog > max_count or state.backlog_bytes > max_bytes
        )

    def _drop_overflow(self) -> None:
        """Dead-letter the oldest messages while the backlog is over its cap (never the one in flight)."""
        for _ in range(self.policy.max_expired_per_event):
            state = self.state
            if not self._over_cap():
                return
            detail = f"backlog over its cap ({state.backlog} messages, {state.backlog_bytes} bytes)"
            if state.cursor:  # unordered: drop the oldest not yet started
                if state.cursor >= state.next_seq:
                    return
                self._dead_letter_unstarted(BACKLOG_FULL, detail)
            elif self.in_flight or state.head is None:
                return
            else:
                self._dead_letter_head(BACKLOG_FULL, detail)

    def _batch_size(self, head: int) -> int:
        """How many messages the next POST carries; 0 while the rate limit says wait."""
        return self._take_tokens(min(self.state.config.options.batch_max, self.state.next_seq - head))

    def _take_tokens(self, want: int) -> int:
        """Up to `want` sends the rate limit allows now; 0 (and the gate set) when it says wait."""
        rate = self.state.config.options.rate_limit
        if not rate:
            return want
        burst, bucket = burst_of(rate), self.state.bucket
        level = bucket.level(rate, burst, self.now)
        if level < 1:
            self.update(next_attempt_at=self.now + bucket.wait(1, rate, burst, self.now))
            return 0
        count = min(want, int(level))
        self.update(bucket=bucket.take(count, rate, burst, self.now))
        return count

    def advance(self) -> None:
        """Do what is due now: drop overflow, dead-letter expired heads, then post the head or a probe."""
        if self._windowed():
            self._advance_window()
            return
        self._drop_overflow()
        if self.state.held:
            return
        for _ in range(self.policy.max_expired_per_event):
            head = self.state.head
            if head is None or self.in_flight:
                return
            if not self.state.head_accepted_at:
                accepted = self.facts.accepted_at(head)
                if accepted is None:
                    self._dead_letter_head(MISSING_ENTRY, "backlog entry missing")
                    continue
                self.update(head_accepted_at=accepted)
            if self.now < expires_at(self.state, self.retry):
                break
            self._dead_letter_head(MAX_AGE, self._too_old(self.state.head_accepted_at))
        else:
            return  # the budget is spent; next_wake is due now, so a wake continues
        state = self.state
        head = state.head
        assert head is not None
        if state.breaker.circuit is Circuit.OPEN:
            if state.breaker.probe_at <= self.now:
                self.update(breaker=state.breaker.probe_sent(self.now, self.policy.breaker))
                self.actions.append(Probe(self.state.breaker.probes))
                self.in_flight = True
        elif state.next_attempt_at <= self.now:
            count = self._batch_size(head)
            if count:
                self.actions.append(Deliver(head, state.attempts + 1, count, state.health.lane))
                self.in_flight = True

    def purge(self) -> None:
        """Dead-letter a bounded number of a deleted (or reset) receiver's messages; a wake does the rest."""
        reason, detail = (
            (RECEIVER_DELETED, "the receiver was deleted") if self.state.deleting
            else (STATE_RESET, "the receiver's state was reset")
        )
        for _ in range(self.policy.max_expired_per_event):
            state = self.state
            if state.backlog == 0:
                return
            if state.window:
                slot = state.window[0]
                self._dead_letter_seq(slot.seq, reason, detail, slot.attempts)
            elif state.cursor:
                self._dead_letter_unstarted(reason, detail)
            else:
                self._dead_letter_head(reason, detail)

    def start_afresh(self) -> None:
        """After a reset: counters, circuit, lane, history and window go; seqs carry on (never reused)."""
        state = self.state
        fresh = ReceiverState(
            state.receiver_id, state.config, next_seq=state.next_seq, delivered_seq=state.next_seq - 1,
            active_since=self.now, dedup_sweep_at=state.dedup_sweep_at,
        )
        self.state, self.dirty = fresh, True
        self.writes.append(ForgetHistory())

    # unordered receivers: the window -------------------------------------------

    def _windowed(self) -> bool:
        """Deliver through the window? Switches in when a receiver becomes unordered, out once drained."""
        state = self.state
        wants = not state.config.options.ordered
        if wants and not state.cursor:
            head = state.delivered_seq + 1
            window: tuple[Slot, ...] = ()
            if state.head is not None and (state.attempts or self.in_flight):
                # The head's attempts (and an attempt of it still out) carry over.
                accepted = state.head_accepted_at or self.facts.accepted_at(head) or self.now
                window = (Slot(head, accepted, state.attempts, state.next_attempt_at),)
            self.update(cursor=head + len(window), window=window)
            self.update(attempts=0, next_attempt_at=0.0, head_accepted_at=0.0)
        elif not wants and state.cursor and not state.window:
            self.update(cursor=0, delivered_seq=state.cursor - 1, attempts=0, next_attempt_at=0.0)
        return bool(self.state.cursor)

    def _advance_window(self) -> None:
        """Dead-letter expired slots, retry the due ones, then start new messages while there is room."""
        self._drop_overflow()
        if self.state.held or (self.in_flight and not self.sending):
            return  # held, or the receiver's one job (a probe) is out
        for slot in self.state.window:
            if slot.seq not in self.sending and self.now >= slot_expires_at(self.state, slot, self.retry):
                self._dead_letter_seq(slot.seq, MAX_AGE, self._too_old(slot.accepted_at), slot.attempts)
        breaker = self.state.breaker
        if breaker.circuit is Circuit.OPEN:
            if not self.sending and breaker.probe_at <= self.now:
                self.update(breaker=breaker.probe_sent(self.now, self.policy.breaker))
                self.actions.append(Probe(self.state.breaker.probes))
                self.in_flight = True
            return
        limit = 1 if breaker.circuit is Circuit.HALF_OPEN else self.state.config.options.max_in_flight
        for slot in self.state.window:
            if len(self.sending) >= limit:
                return
            if slot.seq not in self.sending and slot.next_attempt_at <= self.now:
                if not self._take_tokens(1):
                    return
                self._send_slot(slot)
        for _ in range(limit):
            state = self.state
            full = len(state.window) >= state.config.options.max_in_flight or len(self.sending) >= limit
            if full or state.cursor >= state.next_seq or state.next_attempt_at > self.now:
                return
            if not self._take_tokens(1):
                return
            seq = state.cursor
            self.update(cursor=seq + 1)
            accepted = self.fresh[seq][0] if seq in self.fresh else self.facts.accepted_at(seq)
            if accepted is None:
                self._dead_letter_seq(seq, MISSING_ENTRY, "backlog entry missing")
                continue
            slot = Slot(seq, accepted)
            if self.now >= slot_expires_at(self.state, slot, self.retry):
                self._dead_letter_seq(seq, MAX_AGE, self._too_old(accepted))
                continue
            self.update(window=(*self.state.window, slot))
            self._send_slot(slot)

    def _too_old(self, accepted_at: float) -> str:
        return f"older than max_age {self.retry.max_age:g}s ({self.now - accepted_at:.0f}s)"

    def _send_slot(self, slot: Slot) -> None:
        self.actions.append(Deliver(slot.seq, slot.attempts + 1, 1, self.state.health.lane, parallel=True))
        self.sending.add(slot.seq)
        self.in_flight = True

    def _window_result(self, outcome: Outcome) -> None:
        slot = find(self.state.window, outcome.seq)
        if slot is None or outcome.attempt != slot.attempts + 1:
            self.actions.append(Ignored("stale outcome", outcome.msg_id, outcome.seq))
            self.advance()
            return
        state = self.state
        verdict = self.retry.classify(outcome.status)
        ok = verdict is Verdict.SUCCESS
        self._log(outcome, slot.attempts + 1, "message")
        if ok or state.breaker.circuit is not Circuit.OPEN:  # a late failure does not restart the wait
            self.update(breaker=state.breaker.record(ok, self.now, self.policy.breaker))
        self._observe_lane(outcome)
        if ok:
            self.update(failing_since=0.0, delivered=state.delivered + 1)
            self._settle_seq(slot.seq)
            self.advance()
            return
        attempts = slot.attempts + 1
        self.update(failed_attempts=state.failed_attempts + 1, failing_since=state.failing_since or self.now)
        detail = _describe(outcome)
        failed = (attempts, outcome.status, outcome.error)
        if verdict is Verdict.GONE:
            self.update(disabled=True, disabled_reason=f"receiver answered 410 Gone (seq {outcome.seq})")
            self.update(window=replaced(self.state.window, evolve(slot, attempts=attempts)))
        elif verdict is Verdict.PERMANENT:
            self._dead_letter_seq(slot.seq, PERMANENT_STATUS, f"{detail}, not retryable", *failed)
        elif attempts >= self.retry.max_attempts:
            self._dead_letter_seq(slot.seq, MAX_ATTEMPTS, f"{detail}, {attempts} attempts", *failed)
        else:
            retry_after = None
            if outcome.status in (429, 503):
                retry_after = parse_retry_after(outcome.headers.get("retry-after"), self.now)
            due = self.now + self.retry.next_delay(attempts, self.facts.rand, retry_after)
            self.update(window=replaced(self.state.window, Slot(slot.seq, slot.accepted_at, attempts, due)))
        self._maybe_disable()
        self.advance()

    def _dead_letter_seq(
        self, seq: int, reason: str, detail: str, attempts: int = 0,
        last_status: int | None = None, last_error: str | None = None,
    ) -> None:
        """Dead-letter one message of an unordered receiver and settle it."""
        self.writes.append(DeadLetterHead(seq, reason, detail, attempts, last_status, last_error))
        self._count_dead_letters(1)
        self._settle_seq(seq)

    def _dead_letter_unstarted(self, reason: str, detail: str) -> None:
        """Dead-letter an unordered receiver's oldest message not yet started."""
        seq = self.state.cursor
        self.update(cursor=seq + 1)
        self._dead_letter_seq(seq, reason, detail)

    def _settle_seq(self, seq: int) -> None:
        """One message of the window (or one never started) is done: drop it and move the floor."""
        state = self.state
        window = without(state.window, seq)
        self.update(
            window=window,
            delivered_seq=floor(window, state.cursor) - 1,
            backlog_bytes=max(0, state.backlog_bytes - self._entry_size(seq)),
        )
        self._retire([seq])

    def _retire(self, seqs: Iterable[int]) -> None:
        """Settled messages leave the backlog (the glue keeps them `retain` seconds for catch-up reads)."""
        self.deletes += [DeleteBacklog(seq) for seq in seqs]
        if self.policy.retain and not self.state.retain_sweep_at:
            self.update(retain_sweep_at=self.now + self.policy.retain)

    def _entry_size(self, seq: int) -> int:
        return self.fresh[seq][1] if seq in self.fresh else self.facts.entry_size(seq)


def _describe(outcome: Outcome) -> str:
    if outcome.status is not None:
        return f"HTTP {outcome.status}"
    return outcome.error or "no response"
