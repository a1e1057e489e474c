"""A message for a receiver arrives: turned away, filtered, refused, or stored under the next seq.

Seq numbers are contiguous per receiver and given once per message id: a
duplicate id inside the dedup window is ignored, so a replay after a crash
gets the seq it had. A direct message the receiver's content filter refuses
takes no seq: its id is remembered as filtered (seq 0 in the dedup entry), so
a redelivery of it is a duplicate and its status reads `filtered`. (An event's
copies were filtered at fan-out; a replay of a dead letter is not filtered.)
"""

from __future__ import annotations

from ..records import Message, encode_backlog_entry
from .advance import advance
from .commands import Intake
from .effects import (
    BACKLOG_FULL,
    BEFORE_CREATION,
    RECEIVER_DELETED,
    STATE_RESET,
    TOO_LARGE,
    DeadLetter,
    Effect,
    Ignored,
    PutBacklog,
    RememberFiltered,
    RememberId,
)
from .overflow import drop_overflow, refuses_new
from .step import Step
from .unordered import supersede_waiting

CREATION_SKEW = 10.0  # seconds of clock difference between workers a message's acceptance may show


def take_in(step: Step, command: Intake) -> None:
    """Store the message under the next seq (unless turned away or refused), then post it if it is due."""
    msg = command.message
    turned_away = _turned_away(step, command)
    if turned_away is not None:
        step.actions.append(turned_away)
        return
    if not (msg.from_event or msg.replay_of is not None or step.draft.config.accepts(msg)):
        _filter_out(step, msg)
        return
    seq = step.draft.next_seq
    encoded = encode_backlog_entry(msg, seq)
    refusal = _refusal(step, msg, len(encoded))
    if refusal is not None:
        step.actions.append(refusal)
        return
    _store(step, msg, seq, encoded)
    supersede_waiting(step, msg.ordering_key, seq)
    draft = step.draft
    if draft.cursor or not draft.config.options.ordered:
        advance(step)
    elif draft.head == seq:
        draft.head_accepted_at = msg.accepted_at or step.now
        draft.attempts = 0
        draft.next_attempt_at = 0.0
        advance(step)
    else:
        drop_overflow(step)


def _turned_away(step: Step, command: Intake) -> Effect | None:
    """Why this receiver never takes the message (a dead letter, or ignored), or None."""
    msg, draft = command.message, step.draft
    if draft.purging:
        reason, why = (RECEIVER_DELETED, "deleted") if draft.deleting else (STATE_RESET, "reset")
        return DeadLetter(reason, msg.id, None, f"the receiver is being {why}", msg)
    if command.seen_seq is not None and command.seen_seq < draft.next_seq:
        return Ignored("duplicate message id", msg.id, command.seen_seq)
    created = draft.config.created_at
    if msg.from_event and msg.accepted_at < created:
        # Fan-out matched a newer index than the event's (a backlog of events, or an id
        # deleted and created again): a receiver gets the events accepted after its creation.
        return Ignored("event accepted before the receiver was created", msg.id)
    if msg.accepted_at < created - CREATION_SKEW:
        # Configuration travels apart from messages, so one accepted for a receiver since
        # deleted may be read after the id was created again: it was never this one's. (A
        # receiver gets what was accepted after its creation, as it does for events.)
        why = (f"accepted {created - msg.accepted_at:.0f} s before this receiver was "
               "created (its id deleted and created again, or an accepted_at from before it)")
        return DeadLetter(BEFORE_CREATION, msg.id, None, why, msg)
    return None


def _refusal(step: Step, msg: Message, size: int) -> DeadLetter | None:
    """The dead letter of a message too large to store, or with no room in a `reject` backlog."""
    limit = step.policy.max_entry_bytes
    if size > limit:
        detail = f"stored it would take {size} bytes, over the {limit} a record may hold"
        return DeadLetter(TOO_LARGE, msg.id, None, detail, msg)
    draft = step.draft
    if refuses_new(draft, step.policy, size):
        detail = f"backlog full ({draft.backlog} messages, {draft.backlog_bytes} bytes): refused"
        return DeadLetter(BACKLOG_FULL, msg.id, None, detail, msg)
    return None


def _filter_out(step: Step, msg: Message) -> None:
    """Remember the refused message's id for the dedup window, under no seq."""
    draft, now, window = step.draft, step.now, step.policy.dedup_window
    draft.dedup_sweep_at = draft.dedup_sweep_at or now + window
    step.writes.append(RememberFiltered(msg.id, now + window))
    step.actions.append(Ignored("refused by the receiver's filter", msg.id))


def _store(step: Step, msg: Message, seq: int, encoded: bytes) -> None:
    """The message takes `seq`: its entry and its id are written before the state that counts them."""
    draft, now, window = step.draft, step.now, step.policy.dedup_window
    draft.next_seq = seq + 1
    draft.dedup_sweep_at = draft.dedup_sweep_at or now + window
    draft.backlog_bytes += len(encoded)
    step.writes += [PutBacklog(seq, msg, encoded), RememberId(msg.id, seq, now + window)]
    step.fresh[seq] = (msg.accepted_at or now, len(encoded), msg.ordering_key)
