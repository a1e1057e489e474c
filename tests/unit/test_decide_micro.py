"""`bench.decide_micro` runs, and each case does what its name says. Figures are not checked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench import decide_micro
from dispatcher.domain import actor


def _kinds(result: Any) -> list[str]:
    return [type(effect).__name__ for effect in result[1]]


def test_each_case_is_the_command_it_names() -> None:
    cases = decide_micro._cases(actor)
    assert "Deliver" in _kinds(cases["intake"]())  # stored and posted at once
    new_state, effects = cases["2xx"]()
    assert new_state.delivered_seq == 1 and actor.DeleteBacklog(1) in effects
    assert actor.Deliver(2, 1) in effects  # the next head goes out
    new_state, effects = cases["503"]()
    assert new_state.attempts == 1 and new_state.next_attempt_at > decide_micro.NOW
    assert "Deliver" not in _kinds((new_state, effects))


def test_it_runs_alone_and_beside_an_earlier_module(tmp_path: Path) -> None:
    medians = decide_micro.main(["--runs", "1", "--number", "10"])
    assert set(medians) == {"new"} and set(medians["new"]) == set(decide_micro.CASES)
    earlier = tmp_path / "actor.py"
    earlier.write_text("from dispatcher.domain.actor import *  # noqa: F403\n")
    medians = decide_micro.main(["--runs", "1", "--number", "10", "--old", str(earlier)])
    assert set(medians) == {"old", "new"} and all(v > 0 for v in medians["old"].values())
