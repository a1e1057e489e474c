"""A receiver's status in one word, derived from its state alone (the API's `state.status`)."""

from __future__ import annotations

from ..breaker import Circuit
from .state import ReceiverState

STATUSES = ("active", "retrying", "failing", "paused", "disabled", "unverified", "deleting", "resetting")


def status(state: ReceiverState) -> str:
    """What holds the receiver, else how its deliveries go; the first that applies wins."""
    if state.deleting:
        return "deleting"
    if state.resetting:
        return "resetting"
    if state.disabled:
        return "disabled"
    if state.paused:
        return "paused"
    if not state.config.verified:
        return "unverified"
    if state.breaker.circuit is not Circuit.CLOSED:
        return "failing"
    return "retrying" if waits_for_retry(state) else "active"


def waits_for_retry(state: ReceiverState) -> bool:
    """A message still to be delivered has failed an attempt: the ordered head, or one in the window.

    Not `failing_since`: that says no 2xx came since the first failure (it times the
    disabling), and stays set once the failed messages are dead-lettered and nothing waits.
    """
    if state.cursor:
        return any(slot.attempts for slot in state.window)
    return state.head is not None and state.attempts > 0
