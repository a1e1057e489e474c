"""The commands `decide` applies to one receiver: from producers, the API, deliveries and timers."""

from __future__ import annotations

from dataclasses import dataclass

from ..records import Message, Outcome, ReceiverConfig


@dataclass(slots=True, frozen=True)
class Intake:
    """A message arrived; `seen_seq` is the seq its id was given before, if any."""

    message: Message
    seen_seq: int | None = None


@dataclass(slots=True, frozen=True)
class Configure:
    config: ReceiverConfig
    if_absent: bool = False  # a create: ignored when another receiver has the id (two creates raced)


@dataclass(slots=True, frozen=True)
class Result:
    outcome: Outcome


@dataclass(slots=True, frozen=True)
class Wake:
    """A timer fired; `*_next` are set when the glue just swept expired entries (0: none left)."""

    dedup_next: float | None = None
    retain_next: float | None = None


@dataclass(slots=True, frozen=True)
class Control:
    """`pause`, `resume`, `enable`, `disable`, `delete` or `reset`, by hand through the API."""

    action: str
    reason: str = ""


Command = Intake | Configure | Result | Wake | Control
