"""Heartbeats: an idle receiver hears, every `heartbeat_interval`, the highest seq it should have had.

A receiver that sets `heartbeat_interval` gets a signed `webhook.heartbeat`
(no seq of its own) once nothing has gone to it for that long, carrying
`last_seq`: every seq up to it was delivered or dead-lettered. A receiver that
saw less knows at once that it missed something, and reads it through
catch-up. A heartbeat goes only when nothing is waiting to be delivered and
nothing is out (so it never overtakes a message), never while the circuit is
not closed or the receiver is held or paused at its own request, and its
answer counts towards neither the breaker nor the lane: it is logged, and its
`webhook-delivery-control` header is heeded like any answer's.
"""

from __future__ import annotations

from ..breaker import Circuit
from ..records import Outcome
from .draft import StateDraft
from .effects import Heartbeat, Ignored
from .state import ReceiverState
from .step import Step


def heartbeat_due(state: ReceiverState | StateDraft) -> float | None:
    """When the next heartbeat is due if the receiver stays idle; None when it gets none now."""
    interval = state.config.options.heartbeat_interval
    if not interval or state.held or state.backlog or state.breaker.circuit is not Circuit.CLOSED:
        return None
    idle_since = max(state.last_attempt_at, state.heartbeat_at, state.active_since, state.asked.pause_until)
    return idle_since + interval


def send_heartbeat(step: Step) -> None:
    """Post a heartbeat if one is due and nothing of the receiver's is out."""
    draft = step.draft
    due = heartbeat_due(draft)
    if due is None or due > step.now or step.in_flight or step.sending:
        return
    draft.heartbeats += 1
    draft.heartbeat_at = step.now
    step.actions.append(Heartbeat(draft.heartbeats, draft.next_seq - 1))
    step.in_flight = True


def heartbeat_result(step: Step, outcome: Outcome) -> None:
    """A heartbeat answered: logged (and its header heeded); it never counts as a delivery's answer."""
    draft = step.draft
    if outcome.attempt != draft.heartbeats or outcome.attempt <= draft.heartbeats_answered:
        # an earlier heartbeat's, or this one's again (replayed from the commands topic after a crash)
        step.actions.append(Ignored("stale heartbeat result", outcome.msg_id))
        return
    draft.heartbeats_answered = outcome.attempt
    step.log_attempt(outcome, 0, "heartbeat")
