"""An unordered receiver's window: the messages it has started and not yet settled.

An unordered receiver (`ordering: "none"`) has up to `max_in_flight` messages
out at once. Each one in the window carries its own attempts and retry time;
`cursor` is the next seq not yet started, so every seq below it is either
settled or in the window. The window is bounded by `max_in_flight`, so the
state stays small whatever the backlog.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True, frozen=True)
class Slot:
    seq: int
    accepted_at: float  # when the message was accepted (its age counts from here)
    attempts: int = 0  # failed attempts so far
    next_attempt_at: float = 0.0
    cuts: int = 0  # the adaptive window's cuts when its current attempt went out (aimd.py)


def without(window: tuple[Slot, ...], seq: int) -> tuple[Slot, ...]:
    return tuple(slot for slot in window if slot.seq != seq)


def find(window: tuple[Slot, ...], seq: int) -> Slot | None:
    return next((slot for slot in window if slot.seq == seq), None)


def replaced(window: tuple[Slot, ...], new: Slot) -> tuple[Slot, ...]:
    return tuple(new if slot.seq == new.seq else slot for slot in window)


def floor(window: tuple[Slot, ...], cursor: int) -> int:
    """The lowest unsettled seq: every seq below it got a 2xx or was dead-lettered."""
    return min((slot.seq for slot in window), default=cursor)
