"""When a receiver next needs the actor, derived from its state alone.

Every timer comes from here, so the glue's timer wheel can be rebuilt from
the table after a crash or a rebalance.
"""

from __future__ import annotations

from ..breaker import Circuit
from ..retry import RetryPolicy
from ..window import Slot, has_room, parked
from .draft import StateDraft
from .heartbeats import heartbeat_due
from .inputs import Policy
from .state import ReceiverState


def next_wake(
    state: ReceiverState, policy: Policy, in_flight: bool, sending: frozenset[int] = frozenset()
) -> float | None:
    """When this receiver next needs the actor, or None; derived from the state alone."""
    times = [t for t in (state.dedup_sweep_at, state.retain_sweep_at) if t]
    if state.purging:
        times.append(0.0)  # its backlog is dead-lettered a bounded number at a time: go on now
        return min(times)
    times += _delivery_wakes(state, policy, in_flight, sending)
    return min(times) if times else None


def _delivery_wakes(
    state: ReceiverState, policy: Policy, in_flight: bool, sending: frozenset[int]
) -> list[float]:
    """When a message, a probe or a heartbeat is next due to go, or to expire.

    A pause the receiver asked for holds what goes (until `pause_until`), not
    what expires.
    """
    times: list[float] = []
    if state.cursor:
        times += _window_wakes(state, policy, in_flight and not sending, sending)
    elif state.head is not None and not state.held and not in_flight:
        if state.breaker.circuit is Circuit.OPEN:
            times.append(max(state.breaker.probe_at, state.asked.pause_until))
        else:
            times.append(max(state.next_attempt_at, state.asked.pause_until))
        if state.head_accepted_at:
            times.append(expires_at(state, policy.retry_for(state.config)))
    elif state.breaker.circuit is Circuit.OPEN and not state.held and not in_flight:
        times.append(max(state.breaker.probe_at, state.asked.pause_until))  # nothing left: probes go on
    if not in_flight:
        heartbeat = heartbeat_due(state)
        if heartbeat is not None:
            times.append(heartbeat)
    return times


def _window_wakes(state: ReceiverState, policy: Policy, solo: bool, sending: frozenset[int]) -> list[float]:
    """An unordered receiver's due times: retries and expiries of its idle slots, room to start more."""
    if state.held or solo:
        return []
    retry = policy.retry_for(state.config)
    idle = [slot for slot in state.window if slot.seq not in sending]
    times = [slot_expires_at(state, slot, retry) for slot in idle]
    waiting = parked(state.window)  # key-ordered: their turn comes with an answer, not a time
    gate = max(state.next_attempt_at, state.asked.pause_until)  # the rate limit's, and a pause asked for
    circuit = state.breaker.circuit
    if circuit is Circuit.OPEN:
        return times if sending else [*times, max(state.breaker.probe_at, state.asked.pause_until)]
    limit = state.in_flight_limit if circuit is Circuit.CLOSED else 1
    if len(sending) < limit:  # else the next answer makes room, and advances
        times += [max(slot.next_attempt_at, gate) for slot in idle if slot.seq not in waiting]
        room = has_room(len(state.window), len(waiting), state.config.options.max_in_flight)
        if room and state.cursor < state.next_seq:
            times.append(gate)
    return times


def slot_expires_at(state: ReceiverState | StateDraft, slot: Slot, retry: RetryPolicy) -> float:
    """When a window message passes max_age (the age of parked messages restarts at enable/resume)."""
    return max(slot.accepted_at, state.active_since) + retry.max_age


def expires_at(state: ReceiverState | StateDraft, retry: RetryPolicy) -> float:
    """When the head passes max_age (the age of parked messages restarts at enable/resume)."""
    return max(state.head_accepted_at, state.active_since) + retry.max_age
