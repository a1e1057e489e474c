"""Fast lane or slow lane: the penalty box for receivers that answer slowly or not at all.

Each receiver keeps its last few answer times. It goes to the slow lane when
the p90 of those passes `slow_ms` (with at least `min_samples` of them), or
after `timeouts` timeouts in a row; its deliveries then use the slow lane's
own small budget, so it cannot hold the connection slots fast receivers need.
It is paroled back after `parole_after` fast answers in a row. Failures
without an answer (refused, reset) are no evidence either way: the circuit
breaker deals with those.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Any

from .evolve import evolve

TIMED_OUT = 1 << 30  # the sample a timeout leaves: slower than any answer


class Lane(enum.StrEnum):
    FAST = "fast"
    SLOW = "slow"


@dataclass(slots=True, frozen=True)
class LanePolicy:
    slow_ms: float = 2000.0
    window: int = 10  # answers kept for the percentile
    min_samples: int = 3
    timeouts: int = 3  # in a row
    parole_after: int = 5  # fast answers in a row, in the slow lane

    def enabled(self) -> bool:
        return self.slow_ms > 0


@dataclass(slots=True, frozen=True)
class Health:
    lane: Lane = Lane.FAST
    recent_ms: tuple[int, ...] = ()  # newest last; timeouts count as very slow
    timeouts_in_row: int = 0
    fast_in_row: int = 0
    since: float = 0.0  # when the receiver entered its lane
    moves: int = 0  # lane changes so far

    def p90(self) -> float | None:
        if not self.recent_ms:
            return None
        ordered = sorted(self.recent_ms)
        return float(ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)])

    def view(self) -> dict[str, Any]:
        """For the API: timeouts shown as null rather than as a number."""
        p90 = self.p90()
        return {
            "lane": self.lane.value,
            "since": self.since or None,
            "moves": self.moves,
            "p90_ms": None if p90 is None or p90 >= TIMED_OUT else p90,
            "recent_ms": [None if ms >= TIMED_OUT else ms for ms in self.recent_ms],
            "timeouts_in_row": self.timeouts_in_row,
            "fast_in_row": self.fast_in_row,
        }

    def observe(
        self, latency_ms: float, answered: bool, timed_out: bool, now: float, policy: LanePolicy
    ) -> Health:
        """One attempt finished; return the health with the lane it now belongs in."""
        if not policy.enabled() or not (answered or timed_out):
            return self
        sample = int(latency_ms) if answered else TIMED_OUT
        fast = answered and latency_ms < policy.slow_ms
        recent = (*self.recent_ms, sample)[-policy.window :]
        new = evolve(
            self,
            recent_ms=recent,
            timeouts_in_row=self.timeouts_in_row + 1 if timed_out else 0,
            fast_in_row=self.fast_in_row + 1 if fast else 0,
        )
        if new.lane is Lane.FAST and new._too_slow(policy):
            return Health(Lane.SLOW, recent, new.timeouts_in_row, 0, now, self.moves + 1)
        if new.lane is Lane.SLOW and new.fast_in_row >= policy.parole_after:
            return Health(Lane.FAST, (), 0, 0, now, self.moves + 1)  # a clean record on parole
        return new

    def _too_slow(self, policy: LanePolicy) -> bool:
        if self.timeouts_in_row >= policy.timeouts:
            return True
        p90 = self.p90()
        return len(self.recent_ms) >= policy.min_samples and p90 is not None and p90 >= policy.slow_ms
