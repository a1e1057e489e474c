"""The timing wheel with a fake clock: nothing here sleeps."""

from __future__ import annotations

import itertools
import random

from dispatcher.domain.wheel import TimingWheel


def test_fires_at_due_time_not_before() -> None:
    wheel: TimingWheel[str] = TimingWheel(now=100.0, resolution=0.01)
    wheel.schedule("a", 100.5)
    assert wheel.advance(100.49) == []
    assert wheel.advance(100.5) == ["a"]
    assert wheel.advance(200.0) == []
    assert len(wheel) == 0


def test_due_time_between_ticks_rounds_up() -> None:
    wheel: TimingWheel[str] = TimingWheel(now=0.0, resolution=1.0)
    wheel.schedule("a", 2.2)
    assert wheel.advance(2.9) == []  # tick 2 is before 2.2
    assert wheel.advance(3.0) == ["a"]


def test_past_and_present_due_times_fire_on_next_advance() -> None:
    wheel: TimingWheel[str] = TimingWheel(now=50.0, resolution=0.1)
    wheel.schedule("past", 10.0)
    wheel.schedule("now", 50.0)
    assert wheel.advance(50.0) == ["past", "now"]


def test_cancel_and_reschedule() -> None:
    wheel: TimingWheel[str] = TimingWheel(now=0.0, resolution=0.01)
    wheel.schedule("a", 1.0)
    wheel.schedule("b", 2.0)
    assert wheel.cancel("a") is True
    assert wheel.cancel("a") is False
    wheel.schedule("b", 0.5)  # moving a key replaces its timer
    assert wheel.due_at("b") == 0.5
    assert wheel.advance(10.0) == ["b"]


def test_cascade_across_every_level() -> None:
    """Due times that land on level 0, 1, 2, 3 and 4 all fire at their tick."""
    wheel: TimingWheel[int] = TimingWheel(now=0.0, resolution=1.0)
    dues = [5, 255, 256, 257, 65_535, 65_536, 70_000, 16_777_216, 20_000_000, 5_000_000_000]
    for i, due in enumerate(dues):
        wheel.schedule(i, float(due))
    fired_at: dict[int, int] = {}
    now = 0
    probes = sorted({d for due in dues for d in (due - 1, due)})
    for now in probes:
        for key in wheel.advance(float(now)):
            fired_at[key] = now
    assert fired_at == {i: due for i, due in enumerate(dues)}


def test_idle_gaps_are_skipped_not_walked() -> None:
    """A year idle with one far timer must not walk billions of ticks."""
    wheel: TimingWheel[str] = TimingWheel(now=0.0, resolution=0.001)
    wheel.schedule("later", 365 * 86400.0)
    assert wheel.advance(365 * 86400.0 - 1) == []
    assert wheel.advance(365 * 86400.0) == ["later"]


def test_next_due_is_a_lower_bound() -> None:
    wheel: TimingWheel[str] = TimingWheel(now=0.0, resolution=0.01)
    assert wheel.next_due() is None
    wheel.schedule("a", 30.0)
    bound = wheel.next_due()
    assert bound is not None and bound <= 30.0
    wheel.schedule("b", 0.05)
    assert wheel.next_due() == 0.05


def test_a_million_timers_fire_once_each_in_order() -> None:
    rng = random.Random(3)
    wheel: TimingWheel[int] = TimingWheel(now=0.0, resolution=0.01)
    n = 1_000_000
    dues = [rng.uniform(0, 3 * 86400) for _ in range(n)]
    for key, due in enumerate(dues):
        wheel.schedule(key, due)
    for key in range(0, n, 10):  # cancel a tenth
        wheel.cancel(key)
    assert len(wheel) == n - n // 10
    fired: list[int] = []
    now = 0.0
    steps = 0
    while len(wheel) and steps < 100_000:
        now += 7.3
        steps += 1
        batch = wheel.advance(now)
        assert all(dues[k] <= now for k in batch)
        fired.extend(batch)
    assert len(fired) == n - n // 10
    assert len(set(fired)) == len(fired)
    assert all(k % 10 for k in fired)
    assert all(dues[a] <= dues[b] for a, b in itertools.pairwise(fired))
