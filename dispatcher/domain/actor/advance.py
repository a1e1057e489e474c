"""Do what is due now, in whichever way the receiver delivers (its head, or its window)."""

from __future__ import annotations

from .heartbeats import send_heartbeat
from .ordered import advance_head
from .overflow import drop_overflow
from .step import Step
from .unordered import advance_window, windowed


def advance(step: Step) -> None:
    """Drop overflow, dead-letter what expired, then post what is due (messages, a probe or a heartbeat).

    Nothing goes while the receiver has asked for a pause (webhook-delivery-control); what
    expires meanwhile is dead-lettered all the same.
    """
    in_window = windowed(step)  # first: a change of ordering takes effect here
    drop_overflow(step)
    if in_window:
        advance_window(step)
    else:
        advance_head(step)
    send_heartbeat(step)
