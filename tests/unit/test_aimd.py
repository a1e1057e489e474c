"""The adaptive in-flight window: one answer at a time by table, and whole runs against model receivers."""

from __future__ import annotations

import heapq
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatcher.domain.aimd import AimdPolicy, Congestion, effective, observe

P = AimdPolicy()
T = 1000.0
SERVICE_S = 0.02  # the model receivers' answer time


def answer(
    c: Congestion, status: int | None = 200, latency: float = 10.0, in_use: int | None = None,
    ceiling: int = 32, now: float = T, before_cut: bool = False, error: str | None = None,
) -> Congestion:
    used = c.window or 1 if in_use is None else in_use
    return observe(c, status, error, latency, before_cut, used, ceiling, now, P)


@pytest.mark.parametrize(
    ("before", "kwargs", "window", "reason"),
    [
        # a new receiver starts at 1; slow start grows one per fast answer of a full window
        (Congestion(), {}, 2, "grew"),
        (Congestion(4, 0, 0, 10.0), {}, 5, "grew"),
        # not using its window: no growth
        (Congestion(4, 0, 0, 10.0), {"in_use": 2}, 4, ""),
        # congestion halves, never below 1
        (Congestion(8, 0, 0, 10.0), {"status": 429}, 4, "429"),
        (Congestion(8, 0, 0, 10.0), {"status": 503}, 4, "503"),
        (Congestion(8, 0, 0, 10.0), {"status": None, "error": "timeout"}, 4, "timeout"),
        (Congestion(1, 0, 0, 10.0), {"status": 429}, 1, "429"),
        (Congestion(5, 0, 0, 10.0), {"status": 429}, 2, "429"),
        # answers well above the baseline stop growth, far above it halve; jitter on a fast receiver
        # does neither, and one slow answer among fast ones is smoothed away
        (Congestion(8, 0, 0, 10.0), {"latency": 31.0}, 4, "latency"),
        (Congestion(8, 0, 0, 10.0), {"latency": 25.0}, 8, ""),
        (Congestion(8, 0, 0, 10.0), {"latency": 19.0}, 9, "grew"),
        (Congestion(8, 0, 0, 1.0), {"latency": 10.0}, 9, "grew"),
        (Congestion(8, 0, 0, 10.0, smoothed_ms=10.0), {"latency": 40.0}, 9, "grew"),
        # other failures are the breaker's: no change
        (Congestion(8, 0, 0, 10.0), {"status": 500}, 8, ""),
        (Congestion(8, 0, 0, 10.0), {"status": None, "error": "connection refused"}, 8, ""),
        # an answer to a request sent before the last cut is no signal
        (Congestion(4, 8, 0, 10.0, T - 1, T - 1, "429", 1), {"status": 429, "before_cut": True}, 4, "429"),
        (Congestion(4, 8, 0, 10.0, T - 1, T - 1, "429", 1), {"status": 429}, 2, "429"),
        # a lowered ceiling takes the window down at once
        (Congestion(20, 0, 0, 10.0), {"ceiling": 8, "in_use": 3}, 8, "ceiling"),
    ],
)
def test_one_answer(before: Congestion, kwargs: dict[str, object], window: int, reason: str) -> None:
    after = answer(before, **kwargs)  # type: ignore[arg-type]
    assert after.window == window
    assert after.reason == (reason or before.reason)


def test_after_a_cut_it_regrows_fast_to_just_below_the_cut_then_probes_rarely() -> None:
    c = answer(Congestion(8, 0, 0, 10.0, 0, 0, "grew", 0), status=429)
    assert (c.window, c.plateau) == (4, 8)
    for _ in range(3):
        c = answer(c)
    assert c.window == 7, "one per fast answer back to the plateau less one"
    grown = 0
    for _ in range(7 * P.probe_rounds - 1):
        c = answer(c)
        grown += c.window != 7
    assert (grown, c.window) == (0, 7), "below the last cut it waits for probe_rounds full windows"
    c = answer(c)
    assert c.window == 8
    c = answer(answer(c, in_use=8), in_use=8)  # past the plateau: one a round trip
    for _ in range(8):
        c = answer(c, in_use=c.window)
    assert c.window == 9 and c.plateau == 0


def test_fixed_mode_and_a_receivers_cap() -> None:
    c = Congestion(3)
    assert effective(c, 10, 0, "adaptive") == 3
    assert effective(c, 10, 2, "adaptive") == 2
    assert effective(c, 10, 0, "fixed") == 10
    assert effective(c, 10, 4, "fixed") == 4
    assert effective(Congestion(), 10, 0, "adaptive") == 1


def run_against(
    capacity: int, ceiling: int, answers: int, queueing: bool, adaptive: bool = True, spikes: float = 0.0
) -> tuple[list[int], float, int]:
    """Drive the window against a model receiver that serves `capacity` requests at once.

    The sender keeps the window full, as the actor does. Past its capacity the
    receiver answers 429 at once, or (`queueing`) queues the request FIFO for
    the next of its `capacity` servers (a thread pool behind a queue: the
    answer time grows with the load). A share `spikes` of requests takes
    10-60 ms longer (a pause somewhere). Returns the window after each answer,
    the 2xx answers a second, and the refusals.
    """
    rnd = random.Random(7)
    c, now, open_now, delivered, refused = Congestion(), T, 0, 0, 0
    servers = [T] * capacity  # when each is next free
    pending: list[tuple[float, float, int, int]] = []  # (answered at, sent at, status, cuts when sent)
    windows: list[int] = []
    mode = "adaptive" if adaptive else "fixed"
    for _ in range(answers):
        while open_now < effective(c, ceiling, 0, mode):
            open_now += 1
            if open_now > capacity and not queueing:
                heapq.heappush(pending, (now + 0.001, now, 429, c.cuts))
                continue
            service = SERVICE_S + (rnd.uniform(0.01, 0.06) if rnd.random() < spikes else 0.0)
            start = max(now, heapq.heappop(servers)) if queueing else now
            if queueing:
                heapq.heappush(servers, start + service)
            heapq.heappush(pending, (start + service, now, 200, c.cuts))
        now, sent, status, cuts = heapq.heappop(pending)
        c = observe(c, status, None, (now - sent) * 1000, cuts < c.cuts, open_now, ceiling, now, P)
        open_now -= 1
        delivered += status == 200
        refused += status == 429
        windows.append(effective(c, ceiling, 0, mode))
    return windows, delivered / (now - T), refused


@pytest.mark.parametrize("spikes", [0.0, 0.05])
def test_against_a_receiver_that_refuses_past_k_the_window_settles_at_k(spikes: float) -> None:
    k, answers = 4, 4000
    windows, rate, refused = run_against(k, 32, answers, queueing=False, spikes=spikes)
    _, fixed_rate, _ = run_against(k, k, answers, queueing=False, adaptive=False, spikes=spikes)
    settled = windows[50:]
    assert all(w <= k + 1 for w in settled), "never above K + 1"
    assert sum(w >= k for w in settled) >= 0.9 * len(settled), "at K nearly all the time"
    assert refused <= answers // 20
    assert rate >= 0.9 * fixed_rate, "at least 90 % of what a fixed window of K delivers"


@pytest.mark.parametrize("spikes", [0.0, 0.05])
def test_against_a_receiver_whose_answers_slow_with_load_the_window_stops_short_of_the_ceiling(
    spikes: float,
) -> None:
    k, answers = 4, 4000
    windows, rate, _ = run_against(k, 32, answers, queueing=True, spikes=spikes)
    _, fixed_rate, _ = run_against(k, k, answers, queueing=True, adaptive=False, spikes=spikes)
    settled = windows[50:]
    assert max(settled) <= 3 * k, "a queue of at most about K is let build, not the ceiling's 32"
    assert min(settled) >= k // 2
    assert rate >= 0.9 * fixed_rate


def test_a_receiver_with_room_gets_the_ceiling_within_a_few_round_trips() -> None:
    windows, _, refused = run_against(64, 32, 40, False)
    assert windows[-1] == 32 and refused == 0


@given(
    st.lists(
        st.tuples(st.sampled_from([200, 204, 429, 500, 503, None]), st.floats(0, 60_000), st.integers(0, 80),
                  st.integers(1, 64), st.booleans()),
        max_size=60,
    )
)
def test_the_window_stays_within_one_and_the_ceiling(
    answers: list[tuple[int | None, float, int, int, bool]],
) -> None:
    c, now = Congestion(), T
    for status, latency, in_use, ceiling, before_cut in answers:
        now += 0.01
        c = observe(c, status, None if status else "timeout", latency, before_cut, in_use, ceiling, now, P)
        assert 1 <= c.window <= ceiling
        assert 1 <= effective(c, ceiling, 0, "adaptive") <= ceiling
        assert c.baseline_ms >= 0
