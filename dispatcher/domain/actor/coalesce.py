"""Latest-per-key coalescing (`coalesce: true` on a key-ordered receiver): only a key's newest goes.

A message still waiting (not started yet, parked behind its key, or waiting
for a retry) when a newer one of its ordering key is stored is settled as
superseded: never posted, its seq skipped (the receiver sees a gap, and its
status reads `superseded`). One out now is never superseded: its answer
settles it. The newest seq of each key is indexed in the table (`PutLatest`,
read back through the backlog view), so a message the window reaches later
is checked against it too, however long the backlog.
"""

from __future__ import annotations

from ..delivery_options import DeliveryOptions
from ..ordering_keys import key_hash
from .effects import PutLatest
from .step import Step


def coalescing(options: DeliveryOptions) -> bool:
    return options.keyed and options.coalesce


def note_newest(step: Step, key: str, seq: int) -> list[int]:
    """Message `seq` of `key` was just stored: index it; the seqs of its key now superseded."""
    if not key or not coalescing(step.draft.config.options):
        return []
    step.writes.append(PutLatest(key, seq))
    step.latest[key] = seq
    if (step.in_flight and not step.sending) or not _will_go(step, seq):
        # One job out whose seqs the window cannot name (the ordered head or its batch, carried
        # over from strict): none is known to wait. And a message already past max_age goes nowhere.
        return []
    number = key_hash(key)
    return [slot.seq for slot in step.draft.window
            if slot.key == number and slot.seq not in step.sending and step.key_of(slot.seq) == key]


def newer_of(step: Step, seq: int, key: str) -> int:
    """The seq that supersedes message `seq` (of `key`) as the window reaches it, or 0."""
    if not key or not coalescing(step.draft.config.options):
        return 0
    newer = step.newer_of_key(seq, key)
    return newer if newer and _will_go(step, newer) else 0


def _will_go(step: Step, seq: int) -> bool:
    """Message `seq` is stored and not past max_age: it may go instead of an older one."""
    accepted = step.accepted_at(seq)
    return accepted is not None and step.now < max(accepted, step.draft.active_since) + step.retry.max_age
