"""A receiver's life by hand through the API, and what deleting or resetting it does.

Pause, resume, enable and disable change the state and let it deliver (or
hold) from there. Delete and reset purge: the backlog is dead-lettered a
bounded number of messages per command; then a deleted receiver's table
entries go, and a reset one starts afresh with its seqs carrying on.
"""

from __future__ import annotations

from ..breaker import Breaker
from .advance import advance
from .commands import Control
from .effects import RECEIVER_DELETED, STATE_RESET, Forget, ForgetHistory, Ignored, Unsubscribe
from .ordered import dead_letter_head
from .state import ReceiverState
from .step import Step
from .unordered import dead_letter_seq, dead_letter_unstarted


def control(step: Step, command: Control) -> None:
    """Apply a pause, resume, enable, disable, delete or reset, then do what is due."""
    draft, action = step.draft, command.action
    if action == "pause":
        draft.paused = True
    elif action == "resume":
        draft.paused = False
        draft.active_since = step.now
    elif action == "disable":
        step.disable(command.reason or "disabled through the API")
    elif action == "delete":
        draft.deleting = True
    elif action == "reset":
        draft.resetting = not draft.deleting
    elif action == "enable":
        _enable(step)
    else:
        step.actions.append(Ignored(f"unknown control action {action!r}"))
        return
    advance(step)


def _enable(step: Step) -> None:
    """Enabled by hand: a closed circuit and a head due now; held messages age from now, as on resume."""
    draft = step.draft
    draft.disabled = False
    draft.disabled_reason = ""
    draft.breaker = Breaker()
    draft.failing_since = 0.0
    draft.attempts = 0
    draft.next_attempt_at = 0.0
    draft.active_since = step.now


def purge(step: Step) -> None:
    """Dead-letter some of a deleted (or reset) receiver's messages; with none left, forget or restart it."""
    _dead_letter_some(step)
    if step.draft.backlog == 0 and step.draft.deleting:
        # Nothing left to dead-letter: its entries go, a bounded number per command (the glue
        # deletes the state last, once the rest is gone); until then it reads as deleting.
        step.actions += [Unsubscribe(), Forget()]
    elif step.draft.backlog == 0:
        _start_afresh(step)


def _dead_letter_some(step: Step) -> None:
    """Dead-letter up to `max_expired_per_event` of the messages; a wake does the rest."""
    draft = step.draft
    reason, detail = (
        (RECEIVER_DELETED, "the receiver was deleted") if draft.deleting
        else (STATE_RESET, "the receiver's state was reset")
    )
    for _ in range(step.policy.max_expired_per_event):
        if draft.backlog == 0:
            return
        if draft.window:
            slot = draft.window[0]
            dead_letter_seq(step, slot.seq, reason, detail, slot.attempts)
        elif draft.cursor:
            dead_letter_unstarted(step, reason, detail)
        else:
            dead_letter_head(step, reason, detail)


def _start_afresh(step: Step) -> None:
    """After a reset: counters, circuit, lane, history and window go; seqs carry on (never reused)."""
    draft = step.draft
    step.restart(ReceiverState(
        draft.receiver_id, draft.config, next_seq=draft.next_seq, delivered_seq=draft.next_seq - 1,
        active_since=step.now, dedup_sweep_at=draft.dedup_sweep_at,
    ))
    step.writes.append(ForgetHistory())
