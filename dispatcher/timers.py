"""One timing wheel per owned partition, and the loop that fires them.

A wheel holds at most one timer per receiver: the time its state says it next
needs the actor (`actor.next_wake`). Only that time is in memory; a wheel is
rebuilt from the table when its partition is assigned and dropped when the
partition goes, so nothing is lost with the process. Firing a timer does not
touch the table: it hands the receiver id to `fire`, which sends a wake
command through the partition's stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Awaitable, Callable, Collection

from mode import Service

from .domain.wheel import TimingWheel

log = logging.getLogger(__name__)

Fire = Callable[[str, int], Awaitable[None]]


class PartitionTimers(Service):
    """The wheels, and (once started) the task that fires them; a stop ends it."""

    def __init__(self, fire: Fire, resolution: float = 0.01, clock: Callable[[], float] = time.time):
        super().__init__()
        self._fire = fire
        self._clock = clock
        self._resolution = resolution
        self._wheels: dict[int, TimingWheel[str]] = {}
        self._changed = asyncio.Event()
        # When the run loop wakes by itself: a timer due later needs no early wake-up. Every
        # command sets its receiver's timer, and waking the loop for each was a cost per delivery.
        self._wakes_at = -math.inf
        self.paused = False  # during a rebalance nothing fires

    def __len__(self) -> int:
        return sum(len(w) for w in self._wheels.values())

    def wheel(self, partition: int) -> TimingWheel[str]:
        wheel = self._wheels.get(partition)
        if wheel is None:
            wheel = self._wheels[partition] = TimingWheel(self._clock(), self._resolution)
        return wheel

    def set(self, receiver_id: str, partition: int, at: float | None) -> None:
        """Wake `receiver_id` at `at` (replacing its timer); None cancels it."""
        wheel = self.wheel(partition)
        if at is None:
            wheel.cancel(receiver_id)
            return
        if wheel.due_at(receiver_id) == at:
            return
        wheel.schedule(receiver_id, at)
        if at < self._wakes_at:
            self._changed.set()

    def due_at(self, receiver_id: str, partition: int) -> float | None:
        wheel = self._wheels.get(partition)
        return None if wheel is None else wheel.due_at(receiver_id)

    def drop_partitions(self, partitions: Collection[int]) -> None:
        for partition in partitions:
            self._wheels.pop(partition, None)

    def pop_due(self, now: float) -> list[tuple[str, int]]:
        return [(rid, p) for p, wheel in list(self._wheels.items()) for rid in wheel.advance(now)]

    async def _fire_safely(self, receiver_id: str, partition: int) -> None:
        # One receiver's failure must not end the loop that wakes all the others.
        try:
            await self._fire(receiver_id, partition)
        except Exception:
            log.exception("wake-up failed receiver_id=%s partition=%d", receiver_id, partition)

    def _sleep_for(self, max_sleep: float) -> float:
        bounds = [b for w in self._wheels.values() if (b := w.next_due()) is not None]
        if not bounds:
            return max_sleep
        return min(max_sleep, max(self._resolution, min(bounds) - self._clock()))

    async def on_start(self) -> None:
        self.add_future(self.run())

    async def run(self, max_sleep: float = 0.5) -> None:
        """Fire due wake-ups until the service stops (or the task is cancelled)."""
        while not self.should_stop:
            if not self.paused:
                for rid, partition in self.pop_due(self._clock()):
                    await self._fire_safely(rid, partition)
            delay = self._sleep_for(max_sleep)
            self._changed.clear()
            self._wakes_at = self._clock() + delay
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout=delay)
            self._wakes_at = -math.inf  # awake: whatever is set now is seen before the next sleep
