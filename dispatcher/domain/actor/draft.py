"""`StateDraft`: a receiver's state while one command changes it, mutable and private to that command.

`decide` thaws the state into a draft, changes the draft's fields in place
(an outcome changes about a dozen of them) and freezes it into a new
`ReceiverState` at the end, only if a field's value changed. The caller's
state is never touched, and nothing sets a field of a frozen state.

The three conversions are generated once from the field list (as
dataclasses generates `__init__`): a generic loop over 30 fields would cost
more than the rest of a command. Freezing sets the new state's slots through
their descriptors, which skips the frozen `__setattr__` and a name lookup per
field; the object is new and no one else holds it yet.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from ..aimd import Congestion
from ..breaker import Breaker
from ..delivery_control import Asked
from ..lanes import Health
from ..ratelimit import Bucket
from ..records import ReceiverConfig
from ..window import Slot
from .state import DerivedState, ReceiverState


@dataclass(slots=True, eq=False)
class StateDraft(DerivedState):
    """The fields of `ReceiverState`, same names, types and order (checked at import), settable."""

    receiver_id: str
    config: ReceiverConfig
    next_seq: int
    delivered_seq: int
    attempts: int
    next_attempt_at: float
    head_accepted_at: float
    breaker: Breaker
    failing_since: float
    paused: bool
    disabled: bool
    disabled_reason: str
    active_since: float
    delivered: int
    failed_attempts: int
    dead_lettered: int
    dead_letters_kept: int
    attempt_no: int
    last_status: int | None
    last_error: str | None
    last_attempt_at: float
    dedup_sweep_at: float
    retain_sweep_at: float
    health: Health
    backlog_bytes: int
    bucket: Bucket
    window: tuple[Slot, ...]
    cursor: int
    deleting: bool
    resetting: bool
    congestion: Congestion
    asked: Asked
    heartbeat_at: float
    heartbeats: int
    heartbeats_answered: int


def _field_names() -> list[str]:
    state = [(f.name, f.type) for f in fields(ReceiverState)]
    if state != [(f.name, f.type) for f in fields(StateDraft)]:
        raise TypeError("StateDraft's fields must be ReceiverState's: same names, types and order")
    return [name for name, _ in state]


def _generate(name: str, body: list[str], scope: dict[str, Any]) -> Callable[..., Any]:
    exec("\n    ".join(body), scope)  # code built from the two classes' own field names
    return scope[name]  # type: ignore[no-any-return]


_NAMES = _field_names()
_SETTERS = {f"set_{name}": getattr(ReceiverState, name).__set__ for name in _NAMES}

thaw: Callable[[ReceiverState], StateDraft] = _generate("thaw", [
    "def thaw(state):",
    "draft = make(StateDraft)",
    *(f"draft.{name} = state.{name}" for name in _NAMES),
    "return draft",
], {"make": object.__new__, "StateDraft": StateDraft})
thaw.__doc__ = "A draft holding `state`'s field values."

freeze: Callable[[StateDraft], ReceiverState] = _generate("freeze", [
    "def freeze(draft):",
    "state = make(ReceiverState)",
    *(f"set_{name}(state, draft.{name})" for name in _NAMES),
    "return state",
], {"make": object.__new__, "ReceiverState": ReceiverState, **_SETTERS})
freeze.__doc__ = "A new frozen state holding the draft's field values."

_CHANGED = [f"(draft.{name} is not state.{name} and draft.{name} != state.{name})" for name in _NAMES]
differs: Callable[[StateDraft, ReceiverState], bool] = _generate("differs", [
    "def differs(draft, state):",
    "return " + " or ".join(_CHANGED),  # stops at the first field that changed
], {})
differs.__doc__ = "Does any field of the draft hold a value other than (unequal to) the state's?"
