"""`decide(state, command, facts, policy)`: one command applied to one receiver's state.

It returns the new state and the effects, in the order the glue must run
them. Effect order matters for crash safety: every write of one receiver goes
to one changelog partition in order, so a crash keeps a prefix. Backlog and
dedup entries are written before the state that refers to them, dead letters
before the state that skips them, and a dedup entry counts only when the
saved state has moved past its seq.
"""

from __future__ import annotations

from ..delivery_control import Asked
from ..delivery_options import IGNORE
from ..records import Outcome, ReceiverConfig
from ..untrusted import safe_outcome
from .advance import advance
from .commands import Command, Configure, Control, Intake, Result, Wake
from .effects import UNKNOWN_RECEIVER, DeadLetter, Effect, Ignored, SaveState, Subscribe
from .heartbeats import heartbeat_result
from .inputs import Facts, Policy
from .intake import take_in
from .lifecycle import control, purge
from .ordered import head_result
from .probes import probe_result
from .state import ReceiverState
from .step import Step
from .unordered import key_window, window_result


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
    step = Step(state, facts, policy)
    if isinstance(command, Intake):
        take_in(step, command)
    elif isinstance(command, Result):
        _result(step, safe_outcome(command.outcome, facts.now))  # every value a receiver shaped, bounded
    elif isinstance(command, Control):
        control(step, command)
    else:
        _wake(step, command)
    if step.draft.purging:
        purge(step)
    return step.finish()


def _configure(
    state: ReceiverState | None, config: ReceiverConfig, facts: Facts, policy: Policy
) -> tuple[ReceiverState, list[Effect]]:
    if state is None:
        return ReceiverState(config.id, config, active_since=facts.now), [SaveState(), Subscribe()]
    step = Step(state, facts, policy)
    step.draft.config = config
    if config.options.delivery_control == IGNORE:
        step.draft.asked = Asked()  # set to ignore the header: what the receiver asked no longer holds
    step.actions.append(Subscribe())
    if config.verified and not state.config.verified:
        step.draft.active_since = facts.now  # held messages age from activation, as after resume
    if config.options.keyed and not state.config.options.keyed:
        key_window(step)  # what started unordered keeps its key's order from now on
    advance(step)
    return step.finish()


def _unknown_receiver(command: Command) -> tuple[None, list[Effect]]:
    if isinstance(command, Intake):
        msg = command.message
        return None, [DeadLetter(UNKNOWN_RECEIVER, msg.id, None, "no such receiver", msg)]
    return None, [Ignored("no such receiver")]


def _result(step: Step, outcome: Outcome) -> None:
    """A delivery or probe answered; whatever it was, what is due next goes out."""
    draft = step.draft
    if outcome.heartbeat:
        heartbeat_result(step, outcome)
    elif outcome.probe:
        probe_result(step, outcome)
    elif draft.cursor:
        window_result(step, outcome)
    elif outcome.seq != draft.head or outcome.attempt != draft.attempts + 1:
        # A late or duplicate outcome: from a worker that lost the partition, or
        # replayed from the commands topic after a crash (its effect is in the state).
        step.actions.append(Ignored("stale outcome", outcome.msg_id, outcome.seq))
    else:
        head_result(step, outcome)
    advance(step)


def _wake(step: Step, command: Wake) -> None:
    """A timer fired: take the glue's next sweep times, then do what is due."""
    if command.dedup_next is not None:
        step.draft.dedup_sweep_at = command.dedup_next
    if command.retain_next is not None:
        step.draft.retain_sweep_at = command.retain_next
    advance(step)
