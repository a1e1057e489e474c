"""An ordered receiver's head: the one message (or batch from it) out at a time.

The head is delivered_seq + 1. Only it is ever posted, so seq k+1 is never
sent before seq k got a 2xx or was dead-lettered. Its failed attempts, retry
time and acceptance time live in the state itself.
"""

from __future__ import annotations

from ..breaker import Circuit
from ..records import Outcome
from ..transform import CANCELLED
from .effects import MAX_AGE, MISSING_ENTRY, TRANSFORM_ERROR, DeadLetterHead, Deliver, MarkCancelled
from .probes import send_probe
from .step import Step
from .verdict import Next, rule
from .wakes import expires_at


def advance_head(step: Step) -> None:
    """Dead-letter expired heads; post the head (or a batch from it), or a probe if the circuit is open."""
    draft = step.draft
    if draft.held:
        return
    head = _due_head(step)
    if step.now < draft.asked.pause_until:  # a pause the receiver asked for holds what goes
        return
    if draft.breaker.circuit is Circuit.OPEN:
        if not step.in_flight:  # with nothing left to deliver too: a probe's 2xx closes it then
            send_probe(step)
    elif head is not None and draft.next_attempt_at <= step.now:
        count = _batch_size(step, head)
        if count:
            step.actions.append(Deliver(head, draft.attempts + 1, count, draft.health.lane))
            step.in_flight = True


def _due_head(step: Step) -> int | None:
    """The head once those past max_age (or missing) are dead-lettered; None while none is to post.

    None also when this command's budget of expiries is spent: next_wake is
    then due now, so a wake continues.
    """
    draft = step.draft
    for _ in range(step.policy.max_expired_per_event):
        head = draft.head
        if head is None or step.in_flight:
            return None
        if not draft.head_accepted_at:
            accepted = step.accepted_at(head)
            if accepted is None:
                dead_letter_head(step, MISSING_ENTRY, "backlog entry missing")
                continue
            draft.head_accepted_at = accepted
        if step.now < expires_at(draft, step.retry):
            return head
        dead_letter_head(step, MAX_AGE, step.too_old(draft.head_accepted_at))
    return None


def _batch_size(step: Step, head: int) -> int:
    """How many messages the next POST carries; 0 while the rate limit says wait."""
    draft = step.draft
    return step.take_tokens(min(draft.config.options.batch_max, draft.next_seq - head))


def head_result(step: Step, outcome: Outcome) -> None:
    """The head's current attempt answered (a batch's answer covers seq..last)."""
    draft = step.draft
    if outcome.transform:
        _transformed_head(step, outcome)
        return
    ruling = rule(outcome, draft.attempts, step.retry, step.now, step.facts.rand)
    last = max(outcome.seq, outcome.last)
    draft.breaker = draft.breaker.record(ruling.next is Next.SETTLE, step.now, step.policy.breaker)
    step.tally(outcome, ruling, last - outcome.seq + 1)
    if ruling.next is Next.SETTLE:
        settle_head(step, last)
        return
    draft.attempts = ruling.attempt
    if ruling.next is Next.DISABLE:
        step.disable(ruling.reason)
    elif ruling.next is Next.DEAD_LETTER:
        dead_letter_head(step, ruling.reason, ruling.detail, last)
    else:
        draft.next_attempt_at = ruling.retry_at
    step.maybe_disable()


def _transformed_head(step: Step, outcome: Outcome) -> None:
    """The transform cancelled the head, or failed on it: no POST went, so breaker and lane learn nothing.

    A failure is the template's, the same at every attempt: dead-lettered at once, never retried.
    """
    draft = step.draft
    draft.attempts += 1
    step.log_attempt(outcome, draft.attempts, "message")
    if outcome.transform == CANCELLED:
        step.writes.append(MarkCancelled(outcome.msg_id, outcome.seq))
        settle_head(step, outcome.seq)
    else:
        dead_letter_head(step, TRANSFORM_ERROR, outcome.error or "the transform failed")


def settle_head(step: Step, last: int) -> None:
    """The head (through `last`, for a batch) got a 2xx or was dead-lettered; the next becomes head."""
    draft = step.draft
    first = draft.delivered_seq + 1
    # Through the step: an entry stored by this very command (then dropped by a cap) is not in the
    # table yet, and its bytes must leave the count with it.
    size = sum(step.entry_size(seq) for seq in range(first, last + 1))
    draft.delivered_seq = last
    draft.attempts = 0
    draft.next_attempt_at = 0.0
    draft.head_accepted_at = 0.0
    draft.backlog_bytes = max(0, draft.backlog_bytes - size)
    step.retire(range(first, last + 1))
    head = draft.head
    if head is not None:
        draft.head_accepted_at = step.accepted_at(head) or 0.0


def dead_letter_head(step: Step, reason: str, detail: str, last: int = 0) -> None:
    """Dead-letter the head, or the head through `last` (a batch), then move past them."""
    draft = step.draft
    first = draft.head
    assert first is not None
    last = max(first, last)
    tried = draft.attempts > 0  # else the last status belongs to another message or a probe
    status, error = (draft.last_status, draft.last_error) if tried else (None, None)
    step.writes += [
        DeadLetterHead(seq, reason, detail, draft.attempts, status, error) for seq in range(first, last + 1)
    ]
    step.count_dead_letters(last - first + 1)
    settle_head(step, last)
