"""A receiver's backlog caps (messages and stored bytes): refuse a new message, or drop the oldest.

Which one is the receiver's `backlog_overflow` (else the policy's): `reject`
refuses a message that would not fit; `dead_letter_oldest` takes it and
dead-letters the oldest messages not out while the backlog is over a cap.
"""

from __future__ import annotations

from ..delivery_options import DEAD_LETTER_OLDEST, REJECT
from .draft import StateDraft
from .effects import BACKLOG_FULL
from .inputs import Policy
from .ordered import dead_letter_head
from .state import ReceiverState
from .step import Step
from .unordered import dead_letter_unstarted


def refuses_new(state: ReceiverState | StateDraft, policy: Policy, size: int) -> bool:
    """A `reject` receiver's backlog has no room for one more message of `size` stored bytes."""
    max_count, max_bytes, overflow = policy.backlog_caps(state.config)
    return overflow == REJECT and (state.backlog >= max_count or state.backlog_bytes + size > max_bytes)


def drop_overflow(step: Step) -> None:
    """Dead-letter the oldest messages while the backlog is over its cap (never the one in flight)."""
    draft = step.draft
    for _ in range(step.policy.max_expired_per_event):
        if not _over_cap(step):
            return
        detail = f"backlog over its cap ({draft.backlog} messages, {draft.backlog_bytes} bytes)"
        if draft.cursor:  # unordered: drop the oldest not yet started
            if draft.cursor >= draft.next_seq:
                return
            dead_letter_unstarted(step, BACKLOG_FULL, detail)
        elif step.in_flight or draft.head is None:
            return
        else:
            dead_letter_head(step, BACKLOG_FULL, detail)


def _over_cap(step: Step) -> bool:
    draft = step.draft
    max_count, max_bytes, overflow = step.policy.backlog_caps(draft.config)
    return overflow == DEAD_LETTER_OLDEST and (draft.backlog > max_count or draft.backlog_bytes > max_bytes)
