"""Circuit breaker transitions, with a fake clock."""

from __future__ import annotations

from dispatcher.domain.breaker import Breaker, BreakerPolicy, Circuit

POLICY = BreakerPolicy(failures=5, window=10, ratio=0.5, probe_base=5.0, probe_cap=40.0)


def run(breaker: Breaker, results: str, now: float = 0.0) -> Breaker:
    for ch in results:
        breaker = breaker.record(ch == "+", now, POLICY)
    return breaker


def test_opens_after_n_consecutive_failures() -> None:
    assert run(Breaker(), "----").circuit is Circuit.CLOSED
    opened = run(Breaker(), "-----", now=100.0)
    assert opened.circuit is Circuit.OPEN
    assert (opened.probe_at, opened.opened_at) == (105.0, 100.0)


def test_a_success_resets_the_consecutive_count() -> None:
    assert run(Breaker(), "----+----").circuit is Circuit.CLOSED


def test_opens_on_failure_ratio_over_a_full_window() -> None:
    assert run(Breaker(), "-+-+-+-+-").circuit is Circuit.CLOSED  # window not full yet
    b = run(Breaker(), "-+-+-+-+-+")
    assert b.circuit is Circuit.CLOSED  # 5 failures of 10 but the newest is a success
    assert run(b, "-").circuit is Circuit.OPEN  # 5 of the last 10 failed
    assert run(Breaker(), "+-++-++-++-+").circuit is Circuit.CLOSED  # 4 of 10


def test_probe_intervals_grow_to_the_cap() -> None:
    b = run(Breaker(), "-----")
    waits = []
    now = b.probe_at
    for _ in range(6):
        b = b.probe_sent(now, POLICY)
        b = b.probe_result(False, now, POLICY)
        waits.append(b.probe_at - now)
        now = b.probe_at
    assert waits == [10.0, 20.0, 40.0, 40.0, 40.0, 40.0]
    assert b.circuit is Circuit.OPEN


def test_probe_success_half_opens_and_the_next_result_decides() -> None:
    b = run(Breaker(), "-----")
    b = b.probe_sent(5.0, POLICY).probe_result(True, 5.0, POLICY)
    assert b.circuit is Circuit.HALF_OPEN
    assert b.record(True, 6.0, POLICY).circuit is Circuit.CLOSED
    reopened = b.record(False, 6.0, POLICY)
    assert reopened.circuit is Circuit.OPEN and reopened.probe_at == 6.0 + 10.0


def test_probe_results_do_not_touch_a_closed_circuit() -> None:
    assert Breaker().probe_result(False, 1.0, POLICY) == Breaker()


def test_a_sent_probe_leases_its_slot() -> None:
    """If the probe's result is lost (crash), the next probe is still due later."""
    b = run(Breaker(), "-----").probe_sent(5.0, POLICY)
    assert b.probes == 1 and b.probe_at == 15.0
