"""The receiver actor: pure state transitions, `decide(state, command, facts, policy)`.

Seq numbers are contiguous per receiver. An ordered receiver posts only its
head (`ordered.py`), so seq k+1 is never sent before seq k got a 2xx or was
dead-lettered; an unordered one (`ordering: "none"`) has a window of up to
`max_in_flight` messages out at once, each retried on its own
(`unordered.py`). Both act on one ruling per answer (`verdict.py`).

    state.py      ReceiverState and its bytes in the table
    draft.py      StateDraft: the state while one command changes it
    commands.py   what decide applies; effects.py: what it returns
    inputs.py     Facts (with the backlog view) and Policy
    decide.py     decide: one command, start to finish
    intake.py     a message arrives; overflow.py: the backlog caps
    advance.py    what is due now: ordered.py (the head), unordered.py (the window), probes.py,
                  heartbeats.py
    verdict.py    what one attempt's answer means for its message
    step.py       one command's draft, effects and shared bookkeeping
    lifecycle.py  pause, resume, enable, disable, delete, reset
    wakes.py      next_wake: every timer, derived from the state
    status.py     status: the receiver's state in one word, derived likewise

Every timer is derived from the state (`next_wake`), so the glue's timer
wheel can be rebuilt from the table after a crash or a rebalance.
"""

from .commands import Command, Configure, Control, Intake, Result, Wake
from .decide import decide
from .effects import (
    BACKLOG_FULL,
    BEFORE_CREATION,
    MAX_AGE,
    MAX_ATTEMPTS,
    MISSING_ENTRY,
    PERMANENT_STATUS,
    RECEIVER_DELETED,
    STATE_RESET,
    TOO_LARGE,
    TRANSFORM_ERROR,
    UNKNOWN_RECEIVER,
    DeadLetter,
    DeadLetterHead,
    DeleteBacklog,
    Deliver,
    DropLatest,
    Effect,
    Forget,
    ForgetHistory,
    Heartbeat,
    Ignored,
    LogAttempt,
    MarkCancelled,
    MovedLane,
    Probe,
    PutBacklog,
    PutLatest,
    RememberFiltered,
    RememberId,
    SaveState,
    Subscribe,
    TrimDeadLetters,
    Unsubscribe,
)
from .heartbeats import heartbeat_due
from .inputs import DAY, NO_BACKLOG, BacklogView, Facts, Policy
from .intake import CREATION_SKEW
from .overflow import refuses_new
from .state import ReceiverState
from .status import STATUSES, status
from .wakes import expires_at, next_wake, slot_expires_at

__all__ = [
    "BACKLOG_FULL",
    "BEFORE_CREATION",
    "CREATION_SKEW",
    "DAY",
    "MAX_AGE",
    "MAX_ATTEMPTS",
    "MISSING_ENTRY",
    "NO_BACKLOG",
    "PERMANENT_STATUS",
    "RECEIVER_DELETED",
    "STATE_RESET",
    "STATUSES",
    "TOO_LARGE",
    "UNKNOWN_RECEIVER",
    "BacklogView",
    "Command",
    "Configure",
    "Control",
    "DeadLetter",
    "DeadLetterHead",
    "DeleteBacklog",
    "Deliver",
    "DropLatest",
    "Effect",
    "Facts",
    "Forget",
    "ForgetHistory",
    "Heartbeat",
    "Ignored",
    "Intake",
    "LogAttempt",
    "MovedLane",
    "Policy",
    "Probe",
    "PutBacklog",
    "PutLatest",
    "ReceiverState",
    "RememberFiltered",
    "RememberId",
    "Result",
    "SaveState",
    "Subscribe",
    "TrimDeadLetters",
    "Unsubscribe",
    "Wake",
    "decide",
    "expires_at",
    "heartbeat_due",
    "next_wake",
    "refuses_new",
    "slot_expires_at",
    "status",
]
__all__ += ["TRANSFORM_ERROR", "MarkCancelled"]
