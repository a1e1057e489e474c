"""An open circuit's probes: a `webhook.ping` when one is due, and what its answer does."""

from __future__ import annotations

from ..breaker import Breaker, Circuit
from ..evolve import evolve
from ..records import Outcome
from .effects import Ignored, Probe
from .step import Step


def send_probe(step: Step) -> None:
    """Post a probe if the open circuit's next one is due (its `probe_at` becomes the probe's lease)."""
    draft = step.draft
    if draft.breaker.probe_at <= step.now:
        draft.breaker = draft.breaker.probe_sent(step.now, step.policy.breaker)
        step.actions.append(Probe(draft.breaker.probes))
        step.in_flight = True


def probe_result(step: Step, outcome: Outcome) -> None:
    """A probe's (or a ping's by hand) answer: a 2xx half-opens an open circuit."""
    draft = step.draft
    before = draft.breaker
    number = 0 if outcome.manual else outcome.attempt
    if number and not before.fresh_probe(number):
        step.actions.append(Ignored("stale probe result", outcome.msg_id))
        return
    step.log_attempt(outcome, number, "ping" if outcome.manual else "probe")
    breaker = before.probe_result(outcome.ok, step.now, step.policy.breaker, number)
    if before.circuit is Circuit.OPEN and breaker.circuit is Circuit.HALF_OPEN:
        if not draft.backlog:  # nothing left to try it with (all dead-lettered): it answers, so it is well
            breaker = Breaker()
            draft.failing_since = 0.0
        # the head (unordered: one message of the window) goes out now, once
        draft.next_attempt_at = 0.0
        draft.window = tuple(evolve(slot, next_attempt_at=0.0) for slot in draft.window)
    draft.breaker = breaker
    if not outcome.ok and not outcome.manual and (draft.head is not None or draft.failing_since):
        # failing with messages still waiting, or since before they were dead-lettered: it counts
        draft.failing_since = draft.failing_since or step.now
        step.maybe_disable()
