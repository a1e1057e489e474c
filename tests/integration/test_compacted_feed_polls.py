"""A compacted feed on the embedded broker polls less while its topic is quiet, and still reads a change.

The broker answers a fetch only when its wait runs out, and each fetch costs it
about the same for every partition named: a feed polling 8 partitions ten
times a second was a third of an idle broker's CPU. During a quiet spell the
feed's wait rises (to `idle_poll_ms`); a record brings it back, and a sync
still returns with the change.
"""

from __future__ import annotations

import time

from aiokafka import AIOKafkaProducer

from dispatcher.broker import EmbeddedBroker
from dispatcher.compacted_feed import CompactedFeed
from tests.harness import create_topic, new_app_id, wait_until


class DictFeed(CompactedFeed):
    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.index: dict[bytes, bytes] = {}

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        if key is not None and value is not None:
            self.index[key] = value

    def size(self) -> int:
        return len(self.index)


def fetch_wait_ms(feed: CompactedFeed) -> int | None:
    consumer = feed._consumer
    return None if consumer is None else int(consumer._fetcher._fetch_max_wait_ms)


async def test_a_quiet_feed_polls_less_and_a_record_brings_its_poll_back(broker: EmbeddedBroker) -> None:
    host = broker.url.removeprefix("kafka://")
    topic = f"{new_app_id()}-feed"
    await create_topic(host, topic, 4)
    feed = DictFeed(topic, 4, {"bootstrap_servers": host}, poll_ms=20, idle_poll_ms=400)
    await feed.start()
    try:
        await wait_until(lambda: feed.caught_up.is_set(), 15, "the feed read the empty topic")
        # Quiet: the wait rises to the idle poll (a quarter of the spell at most, so after 1.6 s).
        await wait_until(lambda: fetch_wait_ms(feed) == 400, 15, "the idle poll")
        async with AIOKafkaProducer(bootstrap_servers=host) as producer:
            await producer.send_and_wait(topic, b"v1", key=b"k1", partition=2)
        since = time.monotonic()
        assert await feed.sync(since, 10), "a sync sees the change"
        assert feed.index == {b"k1": b"v1"}
        # The record ended the spell: the wait fell back (it needs 1.6 s of quiet to reach 400 again).
        wait = fetch_wait_ms(feed)
        assert wait is not None and wait < 400
    finally:
        await feed.stop()


async def test_a_sync_does_not_wait_behind_the_readers_long_poll(broker: EmbeddedBroker) -> None:
    """A broker answers one connection's requests in order: a barrier's ListOffsets sent on the reader's
    connection waited for the reader's long poll to end (the quiet feed's 1 s, here 30 s), and every
    event's fan-out, `POST /v1/events` and an unknown token's 401 waited with it."""
    host = broker.url.removeprefix("kafka://")
    topic = f"{new_app_id()}-feed"
    await create_topic(host, topic, 2)
    async with AIOKafkaProducer(bootstrap_servers=host) as producer:  # the first fetch returns at once
        await producer.send_and_wait(topic, b"v1", key=b"k1", partition=0)
    feed = DictFeed(topic, 2, {"bootstrap_servers": host}, poll_ms=30_000, idle_poll_ms=30_000)
    await feed.start()
    try:
        await wait_until(lambda: feed.caught_up.is_set(), 15, "the feed read the topic")
        for n in range(3):  # from the second on, the reader's 30 s poll is surely in flight
            assert await feed.sync(time.monotonic(), 5), f"sync {n} finished while the reader polled"
        assert feed.index == {b"k1": b"v1"}
    finally:
        await feed.stop()
    assert feed._ends._consumer is None, "the feed's stop closed the connection it asked the ends on"
