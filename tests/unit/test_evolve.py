"""`evolve` is `dataclasses.replace` for slotted records: same result, original kept, bad names refused."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest

from dispatcher.domain.actor import ReceiverState
from dispatcher.domain.breaker import Breaker, Circuit
from dispatcher.domain.evolve import evolve
from dispatcher.domain.records import ReceiverConfig


def state() -> ReceiverState:
    return ReceiverState("rcv_1", ReceiverConfig("rcv_1", "https://example.com/hook", "whsec_" + "A" * 32))


def test_evolve_gives_what_replace_gives_and_leaves_the_original() -> None:
    old = state()
    changes = {"next_seq": 7, "breaker": Breaker(Circuit.OPEN, 3), "paused": True}
    new = evolve(old, **changes)
    assert new == replace(old, **changes)
    assert type(new) is ReceiverState and new is not old
    assert (old.next_seq, old.paused, old.breaker) == (1, False, Breaker())
    assert evolve(old) == old


def test_evolve_refuses_an_unknown_field() -> None:
    with pytest.raises(TypeError, match="no field 'next_sequence'"):
        evolve(state(), next_sequence=2)


def test_evolve_refuses_a_class_it_cannot_copy() -> None:
    @dataclass(frozen=True)
    class Plain:
        a: int = 0

    with pytest.raises(TypeError, match="slotted dataclass"):
        evolve(Plain(), a=1)
