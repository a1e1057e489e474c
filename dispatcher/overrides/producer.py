"""Faust's producer, with a flush that waits for every buffered send, on an aiokafka producer that
keeps every topic it sends to in its metadata.

A commit flushes the producer first, so that no offset is committed ahead of
the changelog writes its records caused; our own writes (`table_writer`) go
through `flush_hooks` before Faust's buffer and aiokafka's.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any, cast

from aiokafka import AIOKafkaProducer
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.transport.producer import ProducerBuffer

if TYPE_CHECKING:
    from .app import DispatcherApp


class _DrainingBuffer(ProducerBuffer):
    """Faust's buffer of table changelog sends, with a flush that really drains.

    Faust's `flush()` gives up after one 100 ms wait without a send, and the
    consumer then commits offsets whose changelog writes are still buffered; a
    kill -9 at that moment loses state of records that will not be re-read.
    Offsets must never be committed ahead of the writes they caused, so the
    flush also waits for a send already taken off the queue but not yet handed
    to aiokafka (whose own flush follows this one).
    """

    _sending: int = 0

    async def _send_pending(self, fut: Any) -> None:
        self._sending += 1
        try:
            await super()._send_pending(fut)
        finally:
            self._sending -= 1

    async def flush(self) -> None:
        while self.size or self._sending:
            if self.state != "running":
                raise RuntimeError("Cannot flush: producer not running")
            self.message_sent.clear()  # set by Faust after every completed send
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.message_sent.wait(), timeout=0.1)


class TopicTrackingProducer(AIOKafkaProducer):
    """aiokafka's producer, with every topic it sends to tracked by its client's metadata refreshes.

    aiokafka's client refreshes the metadata of the topics it tracks (of all
    topics while it tracks none), and each refresh replaces what it knew. A
    send tracks its topic only if the client did not know the topic yet, so
    the topics known from the first refreshes of all topics were never
    tracked: once one topic was (the first dead letter, to a topic the broker
    creates on first use), the next refresh dropped every other one. A record
    queued for a dropped topic then had no leader, the sender's refreshes
    never asked for that topic, and the record waited for the request timeout
    (20 minutes in Faust): the API's answer to a batch of messages never
    came, or the actor waited on it and the worker stopped applying records
    (the quick dead-letter expiry bench hung in 4 of 50 runs). Tracked from
    its first send, a topic is in every refresh that follows.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._tracked: set[str] = set()

    def _track(self, topic: str) -> None:
        if topic not in self._tracked:
            self._tracked.add(topic)
            self.client.add_topic(topic)  # before the record is queued: every later refresh asks for it

    async def send(self, topic: str, *args: Any, **kwargs: Any) -> Any:
        self._track(topic)
        return await super().send(topic, *args, **kwargs)

    async def send_batch(self, batch: Any, topic: str, *, partition: int) -> Any:
        self._track(topic)
        return await super().send_batch(batch, topic, partition=partition)


class _Producer(faust_aiokafka.Producer):
    @property
    def _producer_type(self) -> type[AIOKafkaProducer]:
        return TopicTrackingProducer  # what Faust's `_new_producer` builds

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        buffer = _DrainingBuffer(loop=self.loop, beacon=self.beacon)
        buffer.app = cast(ProducerBuffer, self.buffer).app
        self.buffer = buffer

    async def flush(self) -> None:
        """The app's own buffered writes first (the actor table's changelog), then Faust's and aiokafka's."""
        for hook in cast("DispatcherApp", self.app).flush_hooks:
            await hook()
        await super().flush()
