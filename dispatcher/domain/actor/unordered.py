"""An unordered receiver's window: up to `max_in_flight` messages out at once, each retried on its own.

A receiver whose options say `ordering: "none"` switches to the window at
its next command and back once the window is empty after its options say
ordered again. In the window `cursor` is the next seq to start and
delivered_seq the seq below which all are settled (`window.py` holds the
slots).
"""

from __future__ import annotations

from ..aimd import observe
from ..breaker import Circuit
from ..delivery_options import ADAPTIVE
from ..evolve import evolve
from ..records import Outcome
from ..transform import CANCELLED
from ..window import Slot, find, floor, replaced, without
from .effects import MAX_AGE, MISSING_ENTRY, TRANSFORM_ERROR, DeadLetterHead, Deliver, Ignored, MarkCancelled
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
            window = (Slot(head, accepted, draft.attempts, draft.next_attempt_at),)
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
    """Post the window's messages whose retry is due; False when no more may go now."""
    for slot in step.draft.window:
        if len(step.sending) >= limit:
            return False
        if slot.seq not in step.sending and slot.next_attempt_at <= step.now:
            if not step.take_tokens(1):
                return False
            _send(step, slot)
    return True


def _start_new(step: Step, limit: int) -> None:
    """Start messages not yet started while the window, the limit and the rate limit have room."""
    draft = step.draft
    for _ in range(limit):
        # The window holds those waiting for a retry too; only those out count against the limit.
        full = len(draft.window) >= draft.config.options.max_in_flight or len(step.sending) >= limit
        if full or draft.cursor >= draft.next_seq or draft.next_attempt_at > step.now:
            return
        if not step.take_tokens(1):
            return
        seq = draft.cursor
        draft.cursor = seq + 1
        accepted = step.accepted_at(seq)
        if accepted is None:
            dead_letter_seq(step, seq, MISSING_ENTRY, "backlog entry missing")
            continue
        slot = Slot(seq, accepted, cuts=draft.congestion.cuts)
        if step.now >= slot_expires_at(draft, slot, step.retry):
            dead_letter_seq(step, seq, MAX_AGE, step.too_old(accepted))
            continue
        draft.window = (*draft.window, slot)
        _send(step, slot)


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
        retried = Slot(slot.seq, slot.accepted_at, ruling.attempt, ruling.retry_at, slot.cuts)
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


def settle_seq(step: Step, seq: int) -> None:
    """One message of the window (or one never started) is done: drop it and move the floor."""
    draft = step.draft
    window = without(draft.window, seq)
    size = step.entry_size(seq)
    draft.window = window
    draft.delivered_seq = floor(window, draft.cursor) - 1
    draft.backlog_bytes = max(0, draft.backlog_bytes - size)
    step.retire([seq])
