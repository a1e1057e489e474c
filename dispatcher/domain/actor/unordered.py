"""An unordered receiver's window: up to `max_in_flight` messages out at once, each retried on its own.

A receiver whose options say `ordering: "none"` switches to the window at
its next command and back once the window is empty after its options say
ordered again. In the window `cursor` is the next seq to start and
delivered_seq the seq below which all are settled (`window.py` holds the
slots). A key-ordered receiver (`ordering: "key"`) uses the window too: a
message whose key already has a slot in it is parked behind that one, and
goes when the last of its key before it is settled.
"""

from __future__ import annotations

from ..aimd import observe
from ..breaker import Circuit
from ..delivery_options import ADAPTIVE
from ..evolve import evolve
from ..ordering_keys import NO_KEY, key_hash
from ..records import Outcome
from ..transform import CANCELLED
from ..window import MAX_PARKED, Slot, find, floor, has_room, parked, replaced, without
from .coalesce import coalescing, newer_of, note_newest
from .effects import (
    MAX_AGE,
    MISSING_ENTRY,
    TRANSFORM_ERROR,
    DeadLetterHead,
    Deliver,
    DropLatest,
    Ignored,
    MarkCancelled,
)
from .probes import send_probe
from .step import Step
from .verdict import Next, rule
from .wakes import slot_expires_at


def windowed(step: Step) -> bool:
    """Deliver through the window? Switches in when a receiver becomes unordered, out once drained."""
    draft = step.draft
    wants = not draft.config.options.ordered
    if wants and not draft.cursor:
        head = draft.delivered_seq + 1
        window: tuple[Slot, ...] = ()
        if draft.head is not None and (draft.attempts or step.in_flight):
            # The head's attempts (and an attempt of it still out) carry over.
            accepted = draft.head_accepted_at or step.accepted_at(head) or step.now
            key = key_hash(step.key_of(head)) if draft.config.options.keyed else NO_KEY
            window = (Slot(head, accepted, draft.attempts, draft.next_attempt_at, key=key),)
        draft.cursor = head + len(window)
        draft.window = window
        draft.attempts = 0
        draft.next_attempt_at = 0.0
        draft.head_accepted_at = 0.0
    elif not wants and draft.cursor and not draft.window:
        draft.delivered_seq = draft.cursor - 1
        draft.cursor = 0
        draft.attempts = 0
        draft.next_attempt_at = 0.0
    return bool(draft.cursor)


def key_window(step: Step) -> None:
    """A receiver turned key-ordered: the window's slots take their messages' keys."""
    window = step.draft.window
    keyed = tuple(slot if slot.key else evolve(slot, key=key_hash(step.key_of(slot.seq))) for slot in window)
    if keyed != window:
        step.draft.window = keyed


def advance_window(step: Step) -> None:
    """Dead-letter expired slots, retry the due ones, then start new messages while there is room."""
    draft = step.draft
    if draft.held or (step.in_flight and not step.sending):
        return  # held, or the receiver's one job (a probe) is out
    for slot in draft.window:
        if slot.seq not in step.sending and step.now >= slot_expires_at(draft, slot, step.retry):
            dead_letter_seq(step, slot.seq, MAX_AGE, step.too_old(slot.accepted_at), slot.attempts)
    if step.now < draft.asked.pause_until:  # a pause the receiver asked for holds what goes
        return
    breaker = draft.breaker
    if breaker.circuit is Circuit.OPEN:
        if not step.sending:
            send_probe(step)
        return
    limit = 1 if breaker.circuit is Circuit.HALF_OPEN else draft.in_flight_limit
    if _retry_due(step, limit):
        _start_new(step, limit)


def _retry_due(step: Step, limit: int) -> bool:
    """Post the window's messages whose retry is due (or whose key's turn came); False when no more
    may go now."""
    waiting = parked(step.draft.window)
    for slot in step.draft.window:
        if len(step.sending) >= limit:
            return False
        if slot.seq not in step.sending and slot.seq not in waiting and slot.next_attempt_at <= step.now:
            if not step.take_tokens(1):
                return False
            _send(step, slot)
    return True


def _start_new(step: Step, limit: int) -> None:
    """Start messages not yet started while the window, the limit and the rate limit have room.

    A key-ordered receiver's message whose key is in the window is parked
    there instead (no room of the limit, no rate token), up to MAX_PARKED.
    """
    draft = step.draft
    waiting = len(parked(draft.window))
    in_window = {slot.key for slot in draft.window if slot.key}
    for _ in range(limit + MAX_PARKED + step.policy.max_expired_per_event):
        # The window holds those waiting for a retry too; only those out count against the limit.
        if not has_room(len(draft.window), waiting, draft.config.options.max_in_flight):
            return
        if len(step.sending) >= limit or draft.cursor >= draft.next_seq or draft.next_attempt_at > step.now:
            return
        started = _start_next(step, in_window)
        if started == _WAIT:
            return
        waiting += started == _PARKED


_WAIT, _SETTLED, _PARKED, _SENT = "wait", "settled", "parked", "sent"


def _start_next(step: Step, in_window: set[int]) -> str:
    """Start the message at the cursor: sent, parked behind its key, settled unsent (missing,
    expired, superseded), or left for later (the rate limit says wait)."""
    draft = step.draft
    seq = draft.cursor
    text = step.key_of(seq) if draft.config.options.keyed else ""
    newer = newer_of(step, seq, text)
    if newer:  # coalescing: a newer message of its key goes instead
        draft.cursor = seq + 1
        settle_seq(step, seq, superseded_by=newer)
        return _SETTLED
    key = key_hash(text) if text else NO_KEY
    behind = key in in_window  # 0 (no key) never is
    if not behind and not step.take_tokens(1):
        return _WAIT
    draft.cursor = seq + 1
    accepted = step.accepted_at(seq)
    if accepted is None:
        dead_letter_seq(step, seq, MISSING_ENTRY, "backlog entry missing")
        return _SETTLED
    slot = Slot(seq, accepted, cuts=draft.congestion.cuts, key=key)
    if step.now >= slot_expires_at(draft, slot, step.retry):
        dead_letter_seq(step, seq, MAX_AGE, step.too_old(accepted))
        return _SETTLED
    draft.window = (*draft.window, slot)
    if behind:
        return _PARKED
    if key:
        in_window.add(key)
    _send(step, slot)
    return _SENT


def _send(step: Step, slot: Slot) -> None:
    cuts = step.draft.congestion.cuts
    if slot.cuts != cuts:  # its answer will say something of the window as it is now
        step.draft.window = replaced(step.draft.window, evolve(slot, cuts=cuts))
    step.actions.append(Deliver(slot.seq, slot.attempts + 1, 1, step.draft.health.lane, parallel=True))
    step.sending.add(slot.seq)
    step.in_flight = True


def window_result(step: Step, outcome: Outcome) -> None:
    """An attempt of one of the window's messages answered."""
    draft = step.draft
    slot = find(draft.window, outcome.seq)
    if slot is None or outcome.attempt != slot.attempts + 1:
        step.actions.append(Ignored("stale outcome", outcome.msg_id, outcome.seq))
        return
    if outcome.transform:
        _transformed_slot(step, outcome, slot)
        return
    ruling = rule(outcome, slot.attempts, step.retry, step.now, step.facts.rand)
    _adapt(step, outcome, slot)
    ok = ruling.next is Next.SETTLE
    if ok or draft.breaker.circuit is not Circuit.OPEN:  # a late failure does not restart the wait
        draft.breaker = draft.breaker.record(ok, step.now, step.policy.breaker)
    step.tally(outcome, ruling, 1)
    if ok:
        settle_seq(step, slot.seq)
        return
    if ruling.next is Next.DISABLE:
        step.disable(ruling.reason)
        draft.window = replaced(draft.window, evolve(slot, attempts=ruling.attempt))
    elif ruling.next is Next.DEAD_LETTER:
        failed = (ruling.attempt, outcome.status, outcome.error)
        dead_letter_seq(step, slot.seq, ruling.reason, ruling.detail, *failed)
    else:
        retried = evolve(slot, attempts=ruling.attempt, next_attempt_at=ruling.retry_at)
        draft.window = replaced(draft.window, retried)
    step.maybe_disable()


def _transformed_slot(step: Step, outcome: Outcome, slot: Slot) -> None:
    """Cancelled or failed by the transform (no POST: the breaker and the window learn nothing)."""
    attempt = slot.attempts + 1
    step.log_attempt(outcome, attempt, "message")
    if outcome.transform == CANCELLED:
        step.writes.append(MarkCancelled(outcome.msg_id, slot.seq))
        settle_seq(step, slot.seq)
    else:
        detail = outcome.error or "the transform failed"
        dead_letter_seq(step, slot.seq, TRANSFORM_ERROR, detail, attempt, None, outcome.error)


def _adapt(step: Step, outcome: Outcome, slot: Slot) -> None:
    """An answer moves the adaptive window (aimd.py)."""
    draft = step.draft
    options = draft.config.options
    if options.concurrency != ADAPTIVE:
        return
    before_cut = slot.cuts < draft.congestion.cuts  # sent before the last cut: says nothing of the new window
    in_use = len(step.sending) + 1  # this answer's attempt is no longer among those sending
    draft.congestion = observe(draft.congestion, outcome.status, outcome.error, outcome.latency_ms,
                              before_cut, in_use, options.max_in_flight, step.now, step.policy.aimd)


def dead_letter_seq(
    step: Step, seq: int, reason: str, detail: str, attempts: int = 0,
    last_status: int | None = None, last_error: str | None = None,
) -> None:
    """Dead-letter one message of an unordered receiver and settle it."""
    step.writes.append(DeadLetterHead(seq, reason, detail, attempts, last_status, last_error))
    step.count_dead_letters(1)
    settle_seq(step, seq)


def dead_letter_unstarted(step: Step, reason: str, detail: str) -> None:
    """Dead-letter an unordered receiver's oldest message not yet started."""
    seq = step.draft.cursor
    step.draft.cursor = seq + 1
    dead_letter_seq(step, seq, reason, detail)


def settle_seq(step: Step, seq: int, superseded_by: int = 0) -> None:
    """One message of the window (or one never started) is done: drop it and move the floor."""
    draft = step.draft
    if not superseded_by and coalescing(draft.config.options):
        key = step.key_of(seq)
        if key:  # the newest of its key no more: the index lets the key go
            step.deletes.append(DropLatest(key, seq))
    window = without(draft.window, seq)
    size = step.entry_size(seq)
    draft.window = window
    draft.delivered_seq = floor(window, draft.cursor) - 1
    draft.backlog_bytes = max(0, draft.backlog_bytes - size)
    step.retire([seq], superseded_by)


def supersede_waiting(step: Step, key: str, newest: int) -> None:
    """Coalescing: the messages of `key` waiting in the window give way to `newest`, just stored."""
    for seq in note_newest(step, key, newest):
        settle_seq(step, seq, superseded_by=newest)
