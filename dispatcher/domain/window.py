"""An unordered receiver's window: the messages it has started and not yet settled.

An unordered receiver (`ordering: "none"`) has up to `max_in_flight` messages
out at once. Each one in the window carries its own attempts and retry time;
`cursor` is the next seq not yet started, so every seq below it is either
settled or in the window. The window is bounded by `max_in_flight`, so the
state stays small whatever the backlog.

A key-ordered receiver (`ordering: "key"`) delivers through the same window,
each slot carrying its message's key hash: a slot waits (`parked`) while an
earlier slot of its key is in the window, so one key's messages go in seq
order while other keys go past a key that fails. Parked slots take no room of
`max_in_flight`; at most `MAX_PARKED` of them keep the state small, and past
that the receiver starts nothing new until one leaves.
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
    key: int = 0  # key-ordered: the hash of its ordering key (ordering_keys.py); 0 = none


def without(window: tuple[Slot, ...], seq: int) -> tuple[Slot, ...]:
    return tuple(slot for slot in window if slot.seq != seq)


def find(window: tuple[Slot, ...], seq: int) -> Slot | None:
    return next((slot for slot in window if slot.seq == seq), None)


def replaced(window: tuple[Slot, ...], new: Slot) -> tuple[Slot, ...]:
    return tuple(new if slot.seq == new.seq else slot for slot in window)


def floor(window: tuple[Slot, ...], cursor: int) -> int:
    """The lowest unsettled seq: every seq below it got a 2xx or was dead-lettered."""
    return min((slot.seq for slot in window), default=cursor)


MAX_PARKED = 64  # a slot is about 100 bytes of every state write


def parked(window: tuple[Slot, ...]) -> frozenset[int]:
    """Seqs that wait behind an earlier slot of the same key (the window is in seq order)."""
    seen: set[int] = set()
    waiting: list[int] = []
    for slot in window:
        if not slot.key:
            continue
        if slot.key in seen:
            waiting.append(slot.seq)
        else:
            seen.add(slot.key)
    return frozenset(waiting)


def has_room(window: int, waiting: int, max_in_flight: int) -> bool:
    """May a window of `window` slots, `waiting` of them parked, take one more message? Those out or
    due a retry count against max_in_flight; parked ones against MAX_PARKED."""
    return window - waiting < max_in_flight and waiting < MAX_PARKED
