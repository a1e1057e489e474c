"""The slow lane: the paced queue of attempts by receivers in the penalty box.

The actor's stream hands a slow receiver's attempt here instead of starting
it. One task takes them in arrival order, paces them with the worker's
slow-lane token bucket and submits them to the slow lane's own slot budget, so
slow receivers wait here and in their small budget, never in the fast lane's
slots. The queue holds at most one job per attempt slot (one per ordered
receiver, `max_in_flight` per unordered one); a job that is gone by its turn
(the partition moved) is skipped.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from mode import Service

from .deliverer import Deliverer, Job
from .domain.ratelimit import Bucket, burst_of


class Pacer:
    """`rate` starts a second, through one token bucket."""

    def __init__(self, rate: float, clock: Callable[[], float] = time.time) -> None:
        self.rate = rate
        self.burst = burst_of(rate)
        self.bucket = Bucket()
        self.clock = clock

    async def wait_turn(self) -> None:
        if self.rate <= 0:
            return
        wait = self.bucket.wait(1, self.rate, self.burst, self.clock())
        if wait:
            await asyncio.sleep(wait)
        self.bucket = self.bucket.take(1, self.rate, self.burst, self.clock())


class SlowLane(Service):
    """The queue, and (once started) the task that submits its jobs to `deliverer`; a stop ends it."""

    def __init__(self, pacer: Pacer) -> None:
        super().__init__()
        self.pacer = pacer
        self._queue: asyncio.Queue[Job] = asyncio.Queue()
        self.deliverer: Deliverer | None = None  # set once built (it takes `put` as its slow lane)

    def __len__(self) -> int:
        return self._queue.qsize()

    def put(self, job: Job) -> None:
        self._queue.put_nowait(job)

    async def on_start(self) -> None:
        if self.deliverer is None:
            raise RuntimeError("the slow lane starts only once its deliverer is set")
        self.add_future(self.run(self.deliverer))

    async def run(self, deliverer: Deliverer) -> None:
        """Submit queued jobs at the lane's pace, until the service stops (or the task is cancelled)."""
        while not self.should_stop:
            job = await self._queue.get()
            if not deliverer.waiting(job):
                continue
            await self.pacer.wait_turn()
            deliverer.submit(job)
