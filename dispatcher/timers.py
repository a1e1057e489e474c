"""Wake-ups of receivers whose head message is due for another attempt.

Only the due time is in memory; it is rebuilt from the table when a partition
is assigned, so nothing is lost with the process.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import time
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)


class WakeTimers:
    def __init__(self, fire: Callable[[str, int], Awaitable[None]], clock: Callable[[], float] = time.time):
        self._fire = fire
        self._clock = clock
        self._heap: list[tuple[float, str, int]] = []
        self._due: dict[str, float] = {}
        self._changed = asyncio.Event()
        self.paused = False

    def schedule(self, receiver_id: str, partition: int, at: float) -> None:
        """Wake `receiver_id` at `at`; an earlier pending wake-up wins."""
        current = self._due.get(receiver_id)
        if current is not None and current <= at:
            return
        self._due[receiver_id] = at
        heapq.heappush(self._heap, (at, receiver_id, partition))
        self._changed.set()

    def drop_partitions(self, partitions: set[int]) -> None:
        self._heap = [e for e in self._heap if e[2] not in partitions]
        heapq.heapify(self._heap)
        self._due = {rid: at for at, rid, _ in self._heap}

    def __len__(self) -> int:
        return len(self._due)

    def pop_due(self, now: float) -> list[tuple[str, int]]:
        fired = []
        while self._heap and self._heap[0][0] <= now:
            at, rid, partition = heapq.heappop(self._heap)
            if self._due.get(rid) == at:  # skip superseded entries
                del self._due[rid]
                fired.append((rid, partition))
        return fired

    async def _fire_safely(self, receiver_id: str, partition: int) -> None:
        # One receiver's failure must not end the loop that retries all the others.
        try:
            await self._fire(receiver_id, partition)
        except Exception:
            log.exception("wake-up failed receiver_id=%s partition=%d", receiver_id, partition)

    async def run(self, max_sleep: float = 0.5) -> None:
        """Fire due wake-ups until cancelled."""
        while True:
            if not self.paused:
                for rid, partition in self.pop_due(self._clock()):
                    await self._fire_safely(rid, partition)
            delay = max_sleep
            if self._heap:
                delay = min(max_sleep, max(0.0, self._heap[0][0] - self._clock()))
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout=delay)
