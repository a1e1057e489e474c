"""Every worker's copy of every receiver's subscriptions, read from the subscriptions topic.

The owner of a receiver publishes its event types and tenant on every
configure (keyed by receiver id, so the topic keeps the latest per
receiver); every worker reads all partitions from the start, outside the
consumer group, into a `SubscriptionIndex`. Fan-out waits until the feed has
read what was there when it started, so a restarted worker does not fan out
against an empty index. Changes arrive within one poll (`poll_ms`).

`sync(since)` is the read-your-writes barrier: it returns once the index holds
everything the topic held at some moment after `since`. The API waits until a
receiver's subscription record is acked before it answers, so an event seen
after that answer, fanned out after a sync, finds the receiver. One barrier
(a ListOffsets, then reading up to those ends) serves every waiter whose
`since` is older than its start, so a backlog of events shares one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from mode import Service

from .domain.subscriptions import SubscriptionIndex, decode_subscription
from .failures import log_failure
from .overrides.fetcher import adapt_fetch_wait

log = logging.getLogger(__name__)


class SubscriptionFeed(Service):
    """The index of every receiver's subscription; once started, a task reads the topic into it."""

    def __init__(
        self, topic: str, partitions: int, consumer: dict[str, Any], poll_ms: int = 100,
        index: SubscriptionIndex | None = None, declare: Callable[[], Awaitable[Any]] | None = None,
    ) -> None:
        super().__init__()
        self._declare = declare  # creates the topic first: nothing may have been published yet
        self.topic = topic
        self.partitions = partitions
        self.index = index or SubscriptionIndex()
        self._consumer_options = consumer
        self._poll_ms = poll_ms
        self.caught_up = asyncio.Event()
        self.records = 0
        self._consumer: AIOKafkaConsumer | None = None
        self._progress = asyncio.Event()  # set whenever the reader has applied a fetch or restarted
        self._synced_at = float("-inf")  # monotonic: the index held the whole topic as of then
        self._barrier: asyncio.Task[None] | None = None

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        if not key:
            return
        receiver_id = key.decode("utf-8", "replace")
        try:
            subscription = decode_subscription(value)
        except (ValueError, TypeError, AttributeError):
            log.error("unreadable subscription record for receiver_id=%s: skipped", receiver_id)
            return
        if subscription is None:
            self.index.remove(receiver_id)
        else:
            self.index.put(receiver_id, *subscription)
        self.records += 1

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
                failed = log_failure(log, "subscription sync attempt failed", logging.INFO)
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
        ends = await consumer.end_offsets(tps)
        for tp in tps:
            # ListOffsets may stop short of a last batch's end (the embedded broker); a fetch's is exact.
            end = max(ends[tp], consumer.highwater(tp) or 0)
            while await consumer.position(tp) < end:
                if consumer is not self._consumer:
                    raise RuntimeError("the subscription reader restarted")
                await self._wait_progress()
        self._synced_at = max(self._synced_at, started)

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
                log.exception("subscription feed failed; reading again in 1 s")
                await self.sleep(1.0)

    async def _read(self) -> None:
        consumer = AIOKafkaConsumer(
            enable_auto_commit=False, fetch_max_wait_ms=self._poll_ms, **self._consumer_options
        )
        await consumer.start()
        adapt_fetch_wait(consumer)
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
                    log.info("subscriptions read: %d receivers", len(self.index))
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

