"""The penalty box: when a receiver moves to the slow lane, and when it is paroled."""

from __future__ import annotations

import pytest

from dispatcher.domain.lanes import Health, Lane, LanePolicy

POLICY = LanePolicy(slow_ms=1000.0, window=10, min_samples=3, timeouts=2, parole_after=3)


def feed(health: Health, samples: list[str | float], now: float = 0.0) -> Health:
    """"timeout" / "refused" / a latency in ms, one attempt each."""
    for sample in samples:
        if sample == "timeout":
            health = health.observe(15000.0, False, True, now, POLICY)
        elif sample == "refused":
            health = health.observe(1.0, False, False, now, POLICY)
        else:
            assert isinstance(sample, float)
            health = health.observe(sample, True, False, now, POLICY)
    return health


@pytest.mark.parametrize(
    ("samples", "lane"),
    [
        ([5000.0, 5000.0], Lane.FAST),  # too few samples for a percentile
        ([5000.0, 5000.0, 5000.0], Lane.SLOW),
        ([10.0] * 9 + [5000.0], Lane.FAST),  # one slow answer in ten is below the p90
        ([10.0] * 8 + [5000.0] * 2, Lane.SLOW),
        ([10.0, 10.0, 5000.0], Lane.SLOW),  # with few samples the p90 is the slowest
        (["timeout", "timeout"], Lane.SLOW),
        ([10.0] * 10 + ["timeout"] + [10.0] * 9 + ["timeout"], Lane.FAST),  # not in a row; one in ten
        (["refused"] * 20, Lane.FAST),  # no answer, no evidence: the breaker's business
        ([999.0] * 10, Lane.FAST),
        ([1000.0] * 3, Lane.SLOW),
    ],
)
def test_lane_by_recent_answers(samples: list[str | float], lane: Lane) -> None:
    assert feed(Health(), samples).lane is lane


def test_parole_after_a_run_of_fast_answers_with_a_clean_record() -> None:
    slow = feed(Health(), [5000.0] * 3, now=10.0)
    assert (slow.lane, slow.since, slow.moves) == (Lane.SLOW, 10.0, 1)
    almost = feed(slow, [10.0, 10.0, 5000.0, 10.0, 10.0])  # the run restarts after a slow one
    assert almost.lane is Lane.SLOW and almost.fast_in_row == 2
    paroled = feed(almost, [10.0], now=20.0)
    assert (paroled.lane, paroled.since, paroled.moves, paroled.recent_ms) == (Lane.FAST, 20.0, 2, ())
    assert feed(paroled, [5000.0, 5000.0]).lane is Lane.FAST, "old slow samples were forgotten"


def test_a_fast_error_counts_as_a_fast_answer() -> None:
    slow = feed(Health(), ["timeout", "timeout"])
    for _ in range(3):
        slow = slow.observe(5.0, True, False, 0.0, POLICY)  # a quick 500 is still an answer
    assert slow.lane is Lane.FAST


def test_window_keeps_the_newest_samples() -> None:
    health = feed(Health(), [float(ms) for ms in range(1, 13)])
    assert health.recent_ms == tuple(range(3, 13))


def test_lanes_off() -> None:
    off = LanePolicy(slow_ms=0)
    assert Health().observe(60000.0, True, False, 0.0, off) == Health()


def test_view_shows_timeouts_as_null() -> None:
    view = feed(Health(), ["timeout", 20.0]).view()
    assert view["recent_ms"] == [None, 20] and view["p90_ms"] is None and view["lane"] == "fast"
