"""The stall fence, driven by a fake clock: when ownership is in doubt, and when it is known again."""

from __future__ import annotations

import pytest

from dispatcher.domain.stall_fence import StallFence


def fence(ticks: list[float]) -> StallFence:
    f = StallFence(stall_limit=3.0, release_after=2.0)
    for at in ticks:
        f.tick(at)
    return f


@pytest.mark.parametrize(
    ("ticks", "asked_at", "allows"),
    [
        ([], 100.0, True),  # not started: nothing to judge
        ([0.0, 0.1, 0.2], 0.3, True),  # ticking
        ([1.0, 1.1], 4.0, True),  # 2.9 s still: within the limit
        ([1.0, 1.1], 4.2, False),  # 3.1 s still: seen at once, before the loop ticks again
        ([1.0, 1.1, 9.0], 9.0, False),  # the tick after the pause saw it
    ],
)
def test_a_standstill_past_the_limit_holds_the_fence(
    ticks: list[float], asked_at: float, allows: bool
) -> None:
    assert fence(ticks).allows(asked_at) is allows


def test_without_a_rebalance_the_fence_lifts_after_release_after() -> None:
    f = fence([1.0, 10.0])  # paused 9 s, then resumed
    assert not f.allows(10.0) and not f.allows(11.9)
    assert f.allows(12.0), "no rebalance came: the group never dropped this worker"
    assert not f.in_doubt
    f.tick(12.1)
    assert f.allows(12.2), "and it stays lifted while the loop ticks"


def test_after_a_revocation_only_the_new_assignment_lifts_it() -> None:
    f = fence([1.0, 10.0])
    assert not f.allows(10.0)
    f.on_revoked()
    assert not f.allows(60.0), "a rebalance is under way: time alone does not lift it"
    assert f.in_doubt, "what it held may have been another worker's meanwhile"
    f.on_assigned(61.0)
    assert f.allows(61.0) and not f.in_doubt


def test_a_revocation_without_a_stall_changes_nothing() -> None:
    f = fence([1.0, 1.1])
    f.on_revoked()
    assert f.allows(1.2)
    assert not f.revoked
