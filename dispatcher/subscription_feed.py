"""Every worker's copy of every receiver's subscriptions, read from the subscriptions topic.

The owner of a receiver publishes its event types and tenant on every
configure (keyed by receiver id, so the topic keeps the latest per
receiver); every worker reads all partitions from the start, outside the
consumer group, into a `SubscriptionIndex`. Fan-out waits until the feed has
read what was there when it started, so a restarted worker does not fan out
against an empty index. Changes arrive within one poll (`poll_ms`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from .domain.subscriptions import SubscriptionIndex, decode_subscription

log = logging.getLogger(__name__)


class SubscriptionFeed:
    def __init__(
        self, topic: str, partitions: int, consumer: dict[str, Any], poll_ms: int = 100,
        index: SubscriptionIndex | None = None,
    ) -> None:
        self.topic = topic
        self.partitions = partitions
        self.index = index or SubscriptionIndex()
        self._consumer_options = consumer
        self._poll_ms = poll_ms
        self.caught_up = asyncio.Event()
        self.records = 0

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

    async def wait_caught_up(self, limit: float) -> bool:
        """Wait (at most `limit` s) until what the topic held at start has been read."""
        try:
            await asyncio.wait_for(self.caught_up.wait(), limit)
        except TimeoutError:
            return False
        return True

    async def run(self) -> None:
        """Read the topic until cancelled; restart the consumer after an error."""
        while True:
            try:
                await self._read()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("subscription feed failed; reading again in 1 s")
                await asyncio.sleep(1.0)

    async def _read(self) -> None:
        consumer = AIOKafkaConsumer(
            enable_auto_commit=False, fetch_max_wait_ms=self._poll_ms, **self._consumer_options
        )
        await consumer.start()
        try:
            tps = [TopicPartition(self.topic, p) for p in range(self.partitions)]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            while True:
                batch = await consumer.getmany(timeout_ms=1000)
                for records in batch.values():
                    for record in records:
                        self.apply(record.key, record.value)
                if not self.caught_up.is_set() and await self._at_end(consumer, tps):
                    log.info("subscriptions read: %d receivers", len(self.index))
                    self.caught_up.set()
        finally:
            await consumer.stop()

    async def _at_end(self, consumer: AIOKafkaConsumer, tps: list[TopicPartition]) -> bool:
        # A fetch response's high watermark is exact (ListOffsets is not, on the embedded broker).
        for tp in tps:
            highwater = consumer.highwater(tp)
            if highwater is None or await consumer.position(tp) < highwater:
                return False
        return True
