"""The slow lane: a co-partitioned topic of attempts by receivers in the penalty box.

The actor's stream hands a slow receiver's attempt here (a record naming its
job's token) instead of starting it. This agent paces those attempts with the
worker's slow-lane token bucket and submits them to the slow lane's own slot
budget, so slow receivers wait in Kafka and in their small budget, never in
the fast lane's slots. A record whose job is gone (the attempt finished, the
partition moved, the worker restarted) is skipped: the actor's timers start a
fresh attempt.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import orjson

from .deliverer import Deliverer
from .domain.ratelimit import Bucket, burst_of

log = logging.getLogger(__name__)


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


def register_slow_lane(app: Any, topic: Any, deliverer: Deliverer, pacer: Pacer) -> Any:
    async def slow_lane(stream: Any) -> None:
        async for event in stream.events():
            receiver_id = (event.key or b"").decode("utf-8", "replace")
            try:
                token = orjson.loads(event.value)["token"]
            except (orjson.JSONDecodeError, KeyError, TypeError):
                log.error("dropping unreadable slow-lane record for receiver_id=%s", receiver_id)
                continue
            job = deliverer.slow_job(receiver_id, token)
            if job is None:
                continue
            await pacer.wait_turn()
            deliverer.submit(job)

    return app.agent(topic, name="slow_lane", concurrency=1)(slow_lane)
