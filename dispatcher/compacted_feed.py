"""Every worker's copy of a compacted topic, read outside the consumer group: the base of the
subscription feed (receiver id -> event types and tenant) and the token feed (token id -> record).

A worker writes the latest value of a key (receiver id, token id) to the
topic; the topic keeps the latest per key; every worker reads all partitions
from the start into an in-memory index (`apply`, which subclasses define).
`caught_up` is set once the feed has read what was there when it started, so
a restarted worker does not act on an empty index. Changes arrive within one
poll (`poll_ms`).

`sync(since)` is the read-your-writes barrier: it returns once the index holds
everything the topic held at some moment after `since`. The API waits until a
record is acked before it answers, so whatever a worker reads after a sync
started after that answer finds it. One barrier (a ListOffsets, then reading
up to those ends) serves every waiter whose `since` is older than its start, so
a backlog of waiters shares one. Its ListOffsets goes out on a connection of its
own (`ends_reader.py`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from mode import Service

from .ends_reader import EndsReader
from .failures import log_failure
from .fetch_wait import FEED_IDLE_CAP_MS
from .overrides.fetcher import adapt_fetch_wait

log = logging.getLogger(__name__)
IDLE_POLL_MS = FEED_IDLE_CAP_MS  # the poll a quiet spell rises to


class CompactedFeed(Service):
    """An index of a compacted topic's latest values; once started, a task reads the topic into it."""

    what = "records"  # what the index holds, for the log

    def __init__(
        self, topic: str, partitions: int, consumer: dict[str, Any], poll_ms: int = 100,
        declare: Callable[[], Awaitable[Any]] | None = None, idle_poll_ms: int = IDLE_POLL_MS,
    ) -> None:
        super().__init__()
        self._declare = declare  # creates the topic first: nothing may have been published yet
        self.topic = topic
        self.partitions = partitions
        self._consumer_options = consumer
        self._poll_ms = poll_ms
        self._idle_poll_ms = idle_poll_ms
        self.caught_up = asyncio.Event()
        self.records = 0
        self._consumer: AIOKafkaConsumer | None = None
        self._progress = asyncio.Event()  # set whenever the reader has applied a fetch or restarted
        self._synced_at = float("-inf")  # monotonic: the index held the whole topic as of then
        self._barrier: asyncio.Task[None] | None = None
        self._ends = EndsReader(consumer)  # not on the reader's connection, behind its long poll

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        """Put one record (None: a tombstone) into the index."""
        raise NotImplementedError

    def size(self) -> int:
        """How many keys the index holds."""
        raise NotImplementedError

    async def sync(self, since: float, limit: float) -> bool:
        """Wait (at most `limit` s) until the index holds the whole topic as of a moment after `since`.

        `since` is on `time.monotonic()`'s clock. False when the limit passed first.
        """
        deadline = time.monotonic() + limit
        while self._synced_at <= since:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if self._barrier is None or self._barrier.done():
                self._barrier = asyncio.create_task(self._pass_barrier())
                failed = log_failure(log, f"{self.what} sync attempt failed", logging.INFO)
                self._barrier.add_done_callback(failed)
            try:
                await asyncio.wait_for(asyncio.shield(self._barrier), left)
            except TimeoutError:
                return False
            except Exception:  # noqa: BLE001 - logged by its done-callback; the reader is restarting
                await asyncio.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
        return True

    async def _pass_barrier(self) -> None:
        started = time.monotonic()
        while self._consumer is None:
            await self._wait_progress()
        consumer: Any = self._consumer
        tps = [TopicPartition(self.topic, p) for p in range(self.partitions)]
        ends = await self._ends.end_offsets(tps)
        for tp in tps:
            # ListOffsets may stop short of a last batch's end (the embedded broker); a fetch's is exact.
            end = max(ends[tp], consumer.highwater(tp) or 0)
            while await consumer.position(tp) < end:
                if consumer is not self._consumer:
                    raise RuntimeError(f"the {self.what} reader restarted")
                await self._wait_progress()
        self._synced_at = max(self._synced_at, started)

    async def on_stop(self) -> None:
        await self._ends.close()

    async def _wait_progress(self) -> None:
        self._progress.clear()
        await self._progress.wait()

    async def on_start(self) -> None:
        self.add_future(self.run())

    async def run(self) -> None:
        """Read the topic until the service stops; restart the consumer after an error."""
        if self._declare is not None:
            await self._declare()
        while not self.should_stop:
            try:
                await self._read()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s feed failed; reading again in 1 s", self.what)
                await self.sleep(1.0)

    async def _read(self) -> None:
        consumer = AIOKafkaConsumer(
            enable_auto_commit=False, fetch_max_wait_ms=self._poll_ms, **self._consumer_options
        )
        await consumer.start()
        adapt_fetch_wait(consumer, idle_cap_ms=self._idle_poll_ms)
        try:
            tps = [TopicPartition(self.topic, p) for p in range(self.partitions)]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            self._consumer = consumer
            while not self.should_stop:
                batch = await consumer.getmany(timeout_ms=1000)
                for records in batch.values():
                    for record in records:
                        self.apply(record.key, record.value)
                self._progress.set()
                if not self.caught_up.is_set() and await self._at_end(consumer, tps):
                    log.info("%s read: %d", self.what, self.size())
                    self.caught_up.set()
        finally:
            self._consumer = None
            self._progress.set()
            await consumer.stop()

    async def _at_end(self, consumer: AIOKafkaConsumer, tps: list[TopicPartition]) -> bool:
        # A fetch response's high watermark is exact (ListOffsets is not, on the embedded broker).
        for tp in tps:
            highwater = consumer.highwater(tp)
            if highwater is None or await consumer.position(tp) < highwater:
                return False
        return True

