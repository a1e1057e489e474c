"""A token bucket: `rate` tokens a second, holding at most `burst`.

Pure values with the time passed in, so the actor can keep a receiver's bucket
in its state and the slow lane can keep one per worker.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True, frozen=True)
class Bucket:
    tokens: float = 0.0
    at: float | None = None  # when `tokens` was counted; None = never used (full)

    def level(self, rate: float, burst: float, now: float) -> float:
        if self.at is None:
            return burst
        return min(burst, self.tokens + max(0.0, now - self.at) * rate)

    def take(self, n: float, rate: float, burst: float, now: float) -> Bucket:
        return Bucket(self.level(rate, burst, now) - n, now)

    def wait(self, n: float, rate: float, burst: float, now: float) -> float:
        """Seconds until `n` tokens are there (0 if they are now)."""
        missing = n - self.level(rate, burst, now)
        return 0.0 if missing <= 0 else missing / rate


def burst_of(rate: float) -> float:
    """A second's worth of tokens, at least one: smooth, yet an idle receiver gets its first at once."""
    return max(1.0, rate)
