"""Adaptive concurrency: how many of an unordered receiver's messages may be out at once.

AIMD, as TCP does it: the window starts at 1 and grows by one after a run of
fast 2xx answers, and halves (never below 1) when the receiver shows
congestion: a 429 or 503, a timeout, or answers far slower than its baseline.
`max_in_flight` is the ceiling. Refinements keep the window where the
receiver can take it instead of saw-toothing below it:

- Slow start: until the first cut, each fast answer grows the window by one,
  so it doubles every round trip.
- One cut per round trip: answers to requests sent before the last cut say
  nothing about the halved window and are ignored as signals. Each attempt
  carries the count of cuts when it went out, so no clock is compared.
- The window that was cut is remembered (`plateau`): the halved window grows
  back by one per fast answer to just below it, then probes upward only after
  `probe_rounds` full windows of fast answers. Past the plateau, the receiver
  has room again: the plateau is forgotten and growth is one per window.
- Answer times are smoothed, so one slow answer (a pause anywhere) is no
  signal. The baseline is the receiver's answer time unloaded: it drops to
  any faster answer at once and rises only from answers with at most
  `UNLOADED` requests out. Smoothed times past `hold_factor` x the baseline
  stop growth (a queue is building: more in flight would only wait in it);
  past `cut_factor` x, the window halves.

Only answers of a full window count towards growth (RFC 7661): a receiver
sent less than its window says nothing about whether it can take more.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .delivery_options import FIXED
from .evolve import evolve

UNLOADED = 2  # requests out at most for an answer time to say what the receiver takes unloaded

# Why the window last changed
START = "start"
GREW = "grew"
CEILING = "ceiling"


@dataclass(slots=True, frozen=True)
class AimdPolicy:
    probe_rounds: int = 16  # full windows of fast answers before probing past the last cut
    hold_factor: float = 1.5  # smoothed answers slower than baseline x this (and by the slack): no growth
    cut_factor: float = 3.0  # ... slower than baseline x this (and by twice the slack): halve
    latency_slack_ms: float = 10.0  # so that jitter on a 1 ms answer is neither
    baseline_rise: float = 0.05  # the baseline follows slower answers by this fraction each (faster: at once)
    smoothing: float = 0.25  # weight of the newest answer time in the smoothed one the signal reads


@dataclass(slots=True, frozen=True)
class Congestion:
    """One receiver's window and what it learnt; `window` 0 means not started (it starts at 1)."""

    window: int = 0
    plateau: int = 0  # the window at the last cut, until growth passes it; 0 = none
    run: int = 0  # fast 2xx answers of a full window since the window last changed
    baseline_ms: float = 0.0  # recent answer time of an uncongested receiver; 0 = no answer yet
    changed_at: float = 0.0
    cut_at: float = 0.0  # when the window was last cut
    reason: str = ""  # why it last changed: start, grew, ceiling, or the signal that cut it
    cuts: int = 0
    smoothed_ms: float = 0.0  # recent 2xx answer times, smoothed: one slow answer (a pause) is no signal

    def view(self, ceiling: int, mode: str) -> dict[str, Any]:
        """For the API and the console."""
        return {
            "mode": mode,
            "window": effective(self, ceiling, 0, mode),
            "ceiling": ceiling,
            "changed_at": self.changed_at or None,
            "reason": self.reason or None,
            "plateau": self.plateau or None,
            "baseline_ms": round(self.baseline_ms, 3) if self.baseline_ms else None,
            "cuts": self.cuts,
        }


def effective(c: Congestion, ceiling: int, asked: int, mode: str) -> int:
    """How many may be out now: the window (fixed mode: the ceiling), capped by what the receiver asked."""
    limit = min(ceiling, asked) if asked else ceiling
    if mode == FIXED:
        return limit
    return max(1, min(c.window or 1, limit))


def congestion_signal(status: int | None, error: str | None) -> str:
    """The congestion an answer shows, by name, or "" for none."""
    if status in (429, 503):
        return str(status)
    if status is None and error == "timeout":
        return "timeout"
    return ""


def observe(
    c: Congestion, status: int | None, error: str | None, latency_ms: float, before_cut: bool,
    in_use: int, ceiling: int, now: float, policy: AimdPolicy,
) -> Congestion:
    """One answer, `before_cut` if its request went out before the last cut, when `in_use` requests
    (itself included) were out."""
    window = min(c.window or 1, ceiling)
    if window != c.window:
        reason = START if not c.window else CEILING
        c = evolve(c, window=window, plateau=min(c.plateau, ceiling), run=0, changed_at=now, reason=reason)
    signal = congestion_signal(status, error)
    ok = status is not None and 200 <= status < 300
    if ok:
        prior = c.smoothed_ms
        smoothed = prior + (latency_ms - prior) * policy.smoothing if prior else latency_ms
        base = c.baseline_ms
        slow = bool(base) and smoothed > max(base * policy.hold_factor, base + policy.latency_slack_ms)
        if slow and smoothed > max(base * policy.cut_factor, base + 2 * policy.latency_slack_ms):
            signal = "latency"
        c = evolve(c, smoothed_ms=smoothed)
        if latency_ms < c.baseline_ms or not c.baseline_ms or in_use <= UNLOADED:
            c = _with_baseline(c, latency_ms, policy)  # lower at once; higher only from a near-idle receiver
    if signal:
        return c if before_cut else _cut(c, signal, now)
    if not ok:
        return evolve(c, run=0) if c.run else c  # a failure that is no congestion: the breaker's business
    if in_use < c.window or slow:
        return c  # not using its window, or a queue builds: no evidence it could take more
    return _grown(c, ceiling, now, policy)


def _with_baseline(c: Congestion, latency_ms: float, policy: AimdPolicy) -> Congestion:
    base = c.baseline_ms
    if not base or latency_ms <= base:
        return evolve(c, baseline_ms=latency_ms)
    return evolve(c, baseline_ms=base + (latency_ms - base) * policy.baseline_rise)


def _cut(c: Congestion, signal: str, now: float) -> Congestion:
    window = max(1, c.window // 2)
    smoothed = c.baseline_ms if signal == "latency" else c.smoothed_ms  # the halved window is judged afresh
    return Congestion(window, c.window, 0, c.baseline_ms, now, now, signal, c.cuts + 1, smoothed)


def _grown(c: Congestion, ceiling: int, now: float, policy: AimdPolicy) -> Congestion:
    run = c.run + 1
    if run < _run_to_grow(c, policy) or c.window >= ceiling:
        return evolve(c, run=min(run, 1 << 20))
    window = c.window + 1
    plateau = 0 if window > c.plateau else c.plateau  # past the last cut: room again
    return evolve(c, window=window, plateau=plateau, run=0, changed_at=now, reason=GREW)


def _run_to_grow(c: Congestion, policy: AimdPolicy) -> int:
    """Fast answers of a full window the next growth takes."""
    if not c.cuts or c.window < c.plateau - 1:
        return 1  # slow start, or back up to just below the last cut
    if c.window < c.plateau:
        return c.window * policy.probe_rounds  # just below the last cut: probe past it rarely
    return c.window  # one a round trip

