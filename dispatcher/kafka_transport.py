"""Faust's aiokafka transport: configurable fetch wait, and a producer flush that drains.

Faust hardcodes `fetch_max_wait_ms=1500`. A broker that does not answer a
pending fetch as soon as data arrives (the embedded Tansu broker) turns that
wait into the latency of every hop through Kafka, and a delivery outcome makes
one such hop. Real Kafka answers early, so a short wait only costs idle polls.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import faust
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.transport.producer import ProducerBuffer


class _ConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport: Any) -> Any:
        consumer = super()._create_worker_consumer(transport)
        # Read by AIOKafkaConsumer.start() when it builds its fetcher.
        consumer._fetch_max_wait_ms = self.app.fetch_max_wait_ms
        return consumer


class _Consumer(faust_aiokafka.Consumer):
    def _new_consumer_thread(self) -> _ConsumerThread:
        return _ConsumerThread(self, loop=self.loop, beacon=self.beacon)


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


class _Producer(faust_aiokafka.Producer):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        buffer = _DrainingBuffer(loop=self.loop, beacon=self.beacon)
        buffer.app = self.buffer.app
        self.buffer = buffer


class _Transport(faust_aiokafka.Transport):
    Consumer = _Consumer
    Producer = _Producer


class DispatcherApp(faust.App):
    """A Faust app on the transport above; its consumer fetch wait is a setting."""

    fetch_max_wait_ms: int = 1500

    def _new_transport(self) -> Any:
        return _Transport(self.conf.broker_consumer, self)

    def _new_producer_transport(self) -> Any:
        return _Transport(self.conf.broker_producer, self)
