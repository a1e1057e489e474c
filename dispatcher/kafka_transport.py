"""Faust's aiokafka transport with a configurable consumer fetch wait.

Faust hardcodes `fetch_max_wait_ms=1500`. A broker that does not answer a
pending fetch as soon as data arrives (the embedded Tansu broker) turns that
wait into the latency of every hop through Kafka, and a delivery outcome makes
one such hop. Real Kafka answers early, so a short wait only costs idle polls.
"""

from __future__ import annotations

from typing import Any

import faust
from faust.transport.drivers import aiokafka as faust_aiokafka


class _ConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport: Any) -> Any:
        consumer = super()._create_worker_consumer(transport)
        # Read by AIOKafkaConsumer.start() when it builds its fetcher.
        consumer._fetch_max_wait_ms = self.app.fetch_max_wait_ms
        return consumer


class _Consumer(faust_aiokafka.Consumer):
    def _new_consumer_thread(self) -> _ConsumerThread:
        return _ConsumerThread(self, loop=self.loop, beacon=self.beacon)


class _Transport(faust_aiokafka.Transport):
    Consumer = _Consumer


class DispatcherApp(faust.App):
    """A Faust app whose consumer fetch wait is a setting."""

    fetch_max_wait_ms: int = 1500

    def _new_transport(self) -> Any:
        return _Transport(self.conf.broker_consumer, self)
