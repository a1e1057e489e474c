"""`Step`: one command's work on one receiver, the draft of its state and the effects so far.

The bookkeeping here is what the ordered head and the unordered window do
alike: the attempt log, counters, dead-letter counts, retiring settled
messages, the rate limit, the lane, disabling a receiver that keeps failing.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..delivery_control import HEADER, effective_rate, heed
from ..lanes import Health
from ..ratelimit import burst_of
from ..records import Outcome
from ..retry import RetryPolicy
from .draft import StateDraft, differs, freeze, thaw
from .effects import DeleteBacklog, Effect, LogAttempt, MovedLane, SaveState, TrimDeadLetters
from .inputs import DAY, Facts, Policy
from .state import ReceiverState
from .verdict import Next, Ruling


class Step:
    """The draft of one receiver's state and the effects of one command on it.

    `finish` orders the effects for crash safety: records the new state refers
    to (backlog, dedup, dead letters, attempt log), then the state, then
    deletions of what the state no longer refers to, then I/O.
    """

    __slots__ = ("actions", "deletes", "draft", "facts", "fresh", "in_flight", "latest", "now", "policy",
                 "restarted", "retry", "sending", "state", "writes")

    def __init__(self, state: ReceiverState, facts: Facts, policy: Policy) -> None:
        self.state = state  # as the command found it
        self.draft: StateDraft = thaw(state)
        self.facts = facts
        self.now = facts.now
        self.policy = policy
        # From the config the command found: a Configure's new retry settings apply from the next command.
        self.retry: RetryPolicy = policy.retry_for(state.config)
        self.in_flight = facts.in_flight
        self.sending = set(facts.sending)
        # seq -> (accepted at, size, ordering key) of the entries this step stores
        self.fresh: dict[int, tuple[float, int, str]] = {}
        self.latest: dict[str, int] = {}  # ordering key -> the newest seq this step stored of it
        self.restarted = False  # the draft was replaced by a fresh state (a reset): saved whatever it holds
        self.writes: list[Effect] = []
        self.deletes: list[Effect] = []
        self.actions: list[Effect] = []

    def finish(self) -> tuple[ReceiverState, list[Effect]]:
        """The new state (the same object when no field changed) and the effects, in order."""
        if not self.restarted and not differs(self.draft, self.state):
            return self.state, [*self.writes, *self.deletes, *self.actions]
        return freeze(self.draft), [*self.writes, SaveState(), *self.deletes, *self.actions]

    def accepted_at(self, seq: int) -> float | None:
        """When a stored message was accepted (None: no entry), this step's own writes included."""
        stored = self.fresh.get(seq)
        return stored[0] if stored is not None else self.facts.backlog.accepted_at(seq)

    def entry_size(self, seq: int) -> int:
        """A stored message's size in bytes (0: no entry), this step's own writes included."""
        stored = self.fresh.get(seq)
        return stored[1] if stored is not None else self.facts.backlog.size(seq)

    def key_of(self, seq: int) -> str:
        """A stored message's ordering key ("" for none), this step's own writes included."""
        stored = self.fresh.get(seq)
        return stored[2] if stored is not None else self.facts.backlog.key(seq)

    def newer_of_key(self, seq: int, key: str) -> int:
        """A seq newer than `seq` stored under its ordering `key` (coalescing), or 0."""
        newest = self.latest.get(key) or self.facts.backlog.latest(seq)
        # Not yet counted by the state (a crash between the index's write and the state's): none.
        return newest if seq < newest < self.draft.next_seq else 0

    def restart(self, fresh: ReceiverState) -> None:
        """Carry on from `fresh` instead of the draft so far (it is saved)."""
        self.draft = thaw(fresh)
        self.restarted = True

    def log_attempt(self, outcome: Outcome, attempt: int, kind: str) -> None:
        draft = self.draft
        number = draft.attempt_no + 1
        draft.attempt_no = number
        draft.last_status = outcome.status
        draft.last_error = outcome.error
        draft.last_attempt_at = min(outcome.at, self.now)  # an answer from a clock ahead is not the future
        self.writes.append(LogAttempt(number, attempt, kind, outcome, self._heed(outcome)))

    def _heed(self, outcome: Outcome) -> str:
        """Apply the answer's webhook-delivery-control header; what it did, for the attempt log."""
        value = outcome.headers.get(HEADER)
        if value is None:
            return ""
        draft = self.draft
        heeded = heed(draft.asked, value, draft.config.options, self.now, self.policy.max_asked_pause)
        draft.asked = heeded.asked
        if heeded.disable and not draft.disabled:
            self.disable(f"the receiver asked for it ({HEADER}: disable)")
        return heeded.note

    def tally(self, outcome: Outcome, ruling: Ruling, settled: int) -> None:
        """Log a message attempt and count it: the lane's figures, delivered or failed, since when failing.

        `settled`: the messages a 2xx settles (a batch's count). The breaker is
        each path's own: a window takes several answers at once.
        """
        draft = self.draft
        self.log_attempt(outcome, ruling.attempt, "message")
        self._observe_lane(outcome)
        if ruling.next is Next.SETTLE:
            draft.failing_since = 0.0
            draft.delivered += settled
        else:
            draft.failed_attempts += 1
            draft.failing_since = draft.failing_since or self.now

    def _observe_lane(self, outcome: Outcome) -> None:
        before: Health = self.draft.health
        timed_out = outcome.status is None and outcome.error == "timeout"
        health = before.observe(outcome.latency_ms, outcome.status is not None, timed_out, self.now,
                                self.policy.lanes)
        self.draft.health = health
        if health.lane is not before.lane:
            self.actions.append(MovedLane(health.lane, before.p90(), before.timeouts_in_row + timed_out))

    def disable(self, reason: str) -> None:
        self.draft.disabled = True
        self.draft.disabled_reason = reason

    def maybe_disable(self) -> None:
        """Disable a receiver that has failed for `disable_after` without a 2xx."""
        since = self.draft.failing_since
        if not self.draft.disabled and since and self.now - since >= self.policy.disable_after:
            self.disable(f"failing for {(self.now - since) / DAY:.1f} days")

    def count_dead_letters(self, added: int) -> None:
        """Count dead letters just written; past the number kept, the oldest go (after them)."""
        draft = self.draft
        keep = self.policy.dead_letters_keep
        kept = draft.dead_letters_kept + added
        if kept > keep:
            self.writes.append(TrimDeadLetters(keep, kept - keep))
        draft.dead_lettered += added
        draft.dead_letters_kept = min(kept, keep)

    def retire(self, seqs: Iterable[int], superseded_by: int = 0) -> None:
        """Settled messages leave the backlog (the glue keeps them `retain` seconds for catch-up reads)."""
        self.deletes += [DeleteBacklog(seq, superseded_by) for seq in seqs]
        if self.policy.retain and not self.draft.retain_sweep_at:
            self.draft.retain_sweep_at = self.now + self.policy.retain

    def take_tokens(self, want: int) -> int:
        """Up to `want` sends the rate limit allows now; 0 (and the gate set) when it says wait."""
        draft = self.draft
        rate = effective_rate(draft.config.options.rate_limit, draft.asked.rate)
        if not rate:
            return want
        burst, bucket = burst_of(rate), draft.bucket
        level = bucket.level(rate, burst, self.now)
        if level < 1:
            draft.next_attempt_at = self.now + bucket.wait(1, rate, burst, self.now)
            return 0
        count = min(want, int(level))
        draft.bucket = bucket.take(count, rate, burst, self.now)
        return count

    def too_old(self, accepted_at: float) -> str:
        return f"older than max_age {self.retry.max_age:g}s ({self.now - accepted_at:.0f}s)"
