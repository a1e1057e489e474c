"""The worker's stall fence (see `domain/stall_fence.py`): a service that ticks it, its clock, its log."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

from mode import Service

from .domain.stall_fence import StallFence

log = logging.getLogger(__name__)
TICK = 0.1  # seconds between the loop's ticks


class Fence(Service):
    """Ticks the fence every `TICK` s while started: a gap between ticks is what engages it."""

    def __init__(
        self, stall_limit: float, release_after: float, clock: Callable[[], float] = time.monotonic,
        rebalancing: Callable[[], bool] = lambda: False,
        sleep: Callable[[float], Awaitable[None]] | None = None,
    ) -> None:
        super().__init__()
        self._sleep = sleep or self.sleep  # the service's own sleep ends early at stop
        self._fence = StallFence(stall_limit, release_after)
        self._clock = clock
        self._rebalancing = rebalancing
        self._held = False

    def allows(self) -> bool:
        allowed = self._fence.allows(self._clock(), self._rebalancing())
        if allowed == self._held:  # changed: say so once
            self._held = not allowed
            if self._held:
                log.warning(
                    "the event loop stood still for %.1f s: this worker may have lost its partitions; "
                    "no table write or delivery until the consumer group confirms its assignment",
                    self._fence.stalled_for,
                )
            else:
                log.warning("the stall fence is lifted: ownership is confirmed")
        return allowed

    @property
    def in_doubt(self) -> bool:
        return self._fence.in_doubt

    def on_revoked(self) -> None:
        """The group took the partitions back (also: this worker dropped its unsent writes):
        only the next assignment lifts the fence now."""
        self._fence.on_revoked()

    def on_assigned(self) -> None:
        self._fence.on_assigned(self._clock())
        self.allows()  # log the release

    @Service.task
    async def _ticking(self) -> None:
        while not self.should_stop:
            self._fence.tick(self._clock())
            if self._held:
                self.allows()  # lifts by time when no rebalance came
            await self._sleep(TICK)
