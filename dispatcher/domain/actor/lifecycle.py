"""A receiver's life by hand through the API, and what deleting or resetting it does.

Pause, resume, enable and disable change the state and let it deliver (or
hold) from there. Delete and reset purge: the backlog is dead-lettered a
bounded number of messages per command; then a deleted receiver's table
entries go, and a reset one starts afresh with its seqs carrying on (its
attempt log and kept messages go as the reset begins; its dead letters,
the reset's own included, stay).
"""

from __future__ import annotations

from ..breaker import Breaker
from ..evolve import evolve
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
        draft.asked = evolve(draft.asked, pause_until=0.0)  # the operator's word wins over the receiver's
    elif action == "disable":
        step.disable(command.reason or "disabled through the API")
    elif action == "delete":
        draft.deleting = True
    elif action == "reset":
        _begin_reset(step)
    elif action == "enable":
        _enable(step)
    else:
        step.actions.append(Ignored(f"unknown control action {action!r}"))
        return
    advance(step)


def _begin_reset(step: Step) -> None:
    """The attempt log and kept messages from before go now, before the purge, so what the purge
    settles stays readable for catch-up. Dead letters all stay (the purge's `state_reset` ones too):
    without one, a settled message would read as delivered."""
    draft = step.draft
    if draft.deleting or draft.resetting:
        return
    draft.resetting = True
    draft.dead_lettered = 0  # counters start again; the purge's letters are the first counted
    step.writes.append(ForgetHistory())


def _enable(step: Step) -> None:
    """Enabled by hand: a closed circuit and a head due now; held messages age from now, as on resume."""
    draft = step.draft
    draft.disabled = False
    draft.asked = evolve(draft.asked, pause_until=0.0)
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
    """After a reset: counters, circuit, lane and window go; seqs carry on (never reused).

    Dead letters stay (and the count the trim keeps by), and so do the messages the purge settled,
    kept for catch-up reads until the retention sweep (hence its time carries on too).
    """
    draft = step.draft
    step.restart(ReceiverState(
        draft.receiver_id, draft.config, next_seq=draft.next_seq, delivered_seq=draft.next_seq - 1,
        active_since=step.now, dedup_sweep_at=draft.dedup_sweep_at, retain_sweep_at=draft.retain_sweep_at,
        dead_lettered=draft.dead_lettered, dead_letters_kept=draft.dead_letters_kept,
        heartbeats=draft.heartbeats, heartbeats_answered=draft.heartbeats,  # numbers are never reused
    ))
