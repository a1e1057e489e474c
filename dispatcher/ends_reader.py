"""Partition ends (ListOffsets) asked on a connection of their own.

A broker answers one connection's requests in order, and a consumer's
connection mostly holds a fetch: a long poll of up to the consumer's fetch wait
(a quiet feed's 1 s, the group's 250 ms). A ListOffsets sent on it waited for
that poll to end, so every read-your-writes barrier (a fan-out's, `POST
/v1/events`'s, an unknown token's, a status read of an unknown message id) did
too. This reader's consumer has no assignment, so it never fetches: its
connection is free when asked. It starts at the first question.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition


class EndsReader:
    def __init__(self, options: dict[str, Any]) -> None:
        self._options = options  # bootstrap servers, client id, credentials
        self._consumer: AIOKafkaConsumer | None = None
        self._starting = asyncio.Lock()  # callers at once start one consumer, not one each
        self._closed = False

    async def end_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        consumer = self._consumer or await self._start()
        ends: dict[TopicPartition, int] = await consumer.end_offsets(tps)
        return ends

    async def _start(self) -> AIOKafkaConsumer:
        async with self._starting:
            if self._consumer is not None:
                return self._consumer
            if self._closed:
                raise RuntimeError("the ends reader is closed")
            consumer = AIOKafkaConsumer(enable_auto_commit=False, **self._options)
            try:
                await consumer.start()
                if self._closed:  # closed while it started: close() did not see it
                    raise RuntimeError("the ends reader is closed")
            except BaseException:
                await consumer.stop()
                raise
            self._consumer = consumer
            return consumer

    async def close(self) -> None:
        self._closed = True
        if self._consumer is not None:
            consumer, self._consumer = self._consumer, None
            await consumer.stop()
