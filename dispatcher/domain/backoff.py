"""Retry delay for the head message: capped exponential with proportional jitter.

The full retry engine (schedules, Retry-After, classification) builds on this.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True, frozen=True)
class Backoff:
    base: float = 0.5
    cap: float = 60.0
    jitter: float = 0.2  # ± fraction of the delay

    def delay(self, attempts: int, rand: float) -> float:
        """Seconds to wait after the `attempts`-th failure; `rand` is uniform in [0, 1)."""
        raw = min(self.cap, self.base * 2 ** max(0, attempts - 1))
        return max(0.0, raw * (1 + self.jitter * (2 * rand - 1)))
