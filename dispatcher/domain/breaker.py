"""Circuit breaker per receiver: closed → open → half-open → closed.

Closed: messages go out. It opens after `failures` consecutive failed attempts,
or when at least `ratio` of the last `window` attempts failed. Open: nothing is
posted but probes (`webhook.ping`, no seq) at growing intervals. A probe's 2xx
makes it half-open: the head message goes out once; its 2xx closes the circuit,
its failure opens it again. The backlog is untouched throughout.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from .evolve import evolve


class Circuit(enum.StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


@dataclass(slots=True, frozen=True)
class BreakerPolicy:
    failures: int = 5
    window: int = 20
    ratio: float = 0.5
    probe_base: float = 5.0
    probe_cap: float = 300.0

    def probe_delay(self, probes: int) -> float:
        """Wait before probe number `probes + 1` (doubling, capped)."""
        return min(self.probe_cap, self.probe_base * float(2 ** min(probes, 32)))


@dataclass(slots=True, frozen=True)
class Breaker:
    circuit: Circuit = Circuit.CLOSED
    consecutive: int = 0  # consecutive failures
    recent: int = 0  # bit i = attempt i back failed (newest is bit 0)
    recent_n: int = 0
    probes: int = 0  # probes sent since the circuit opened
    answered: int = 0  # the last probe whose result was applied
    probe_at: float = 0.0  # when the next probe is due (open only)
    opened_at: float = 0.0

    def failure_ratio(self) -> float:
        return self.recent.bit_count() / self.recent_n if self.recent_n else 0.0

    def record(self, ok: bool, now: float, policy: BreakerPolicy) -> Breaker:
        """A message attempt finished (closed or half-open)."""
        mask = (1 << policy.window) - 1
        recent = ((self.recent << 1) | (0 if ok else 1)) & mask
        n = min(self.recent_n + 1, policy.window)
        if ok:
            return Breaker(Circuit.CLOSED, 0, recent, n)
        consecutive = self.consecutive + 1
        tripped = (
            self.circuit is Circuit.HALF_OPEN
            or consecutive >= policy.failures
            or (n >= policy.window and recent.bit_count() >= policy.ratio * n)
        )
        if tripped:
            return self._open(now, policy, consecutive, recent, n)
        return evolve(self, consecutive=consecutive, recent=recent, recent_n=n)

    def probe_result(self, ok: bool, now: float, policy: BreakerPolicy, number: int = 0) -> Breaker:
        """Probe `number` finished (0: a ping asked for by hand); only an open circuit cares."""
        if self.circuit is not Circuit.OPEN or (number and not self.fresh_probe(number)):
            return self
        answered = number or self.answered
        if ok:
            return evolve(self, circuit=Circuit.HALF_OPEN, probe_at=0.0, answered=answered)
        return evolve(self, probe_at=now + policy.probe_delay(self.probes), answered=answered)

    def fresh_probe(self, number: int) -> bool:
        """False for an older probe's result, or this one's replayed after a crash."""
        return number == self.probes and number > self.answered

    def probe_sent(self, now: float, policy: BreakerPolicy) -> Breaker:
        """A probe went out; `probe_at` becomes its lease, in case its result is lost."""
        return evolve(self, probes=self.probes + 1, probe_at=now + policy.probe_delay(self.probes + 1))

    def _open(self, now: float, policy: BreakerPolicy, consecutive: int, recent: int, n: int) -> Breaker:
        probes = self.probes if self.circuit is Circuit.HALF_OPEN else 0
        opened_at = self.opened_at if self.circuit is Circuit.HALF_OPEN else now
        return Breaker(
            circuit=Circuit.OPEN,
            consecutive=consecutive,
            recent=recent,
            recent_n=n,
            probes=probes,
            answered=probes,
            probe_at=now + policy.probe_delay(probes),
            opened_at=opened_at,
        )
