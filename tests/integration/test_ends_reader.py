"""The ends reader against the embedded broker: one consumer however many ask at once, none after close."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from dispatcher.broker import EmbeddedBroker
from dispatcher.ends_reader import EndsReader
from tests.harness import create_topic, new_app_id


async def test_callers_at_once_share_one_consumer_and_a_closed_reader_starts_none(
    broker: EmbeddedBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = broker.url.removeprefix("kafka://")
    topic = f"{new_app_id()}-ends"
    await create_topic(host, topic, 3)
    async with AIOKafkaProducer(bootstrap_servers=host) as producer:
        for n in range(4):
            await producer.send_and_wait(topic, b"v", key=b"k%d" % n, partition=1)
    started: list[AIOKafkaConsumer] = []
    start = AIOKafkaConsumer.start

    async def counted(self: AIOKafkaConsumer) -> None:
        started.append(self)
        await start(self)

    monkeypatch.setattr(AIOKafkaConsumer, "start", counted)
    reader = EndsReader({"bootstrap_servers": host})
    tps = [TopicPartition(topic, p) for p in range(3)]
    try:
        answers = await asyncio.gather(*(reader.end_offsets([tp]) for tp in tps * 3))
    finally:
        await reader.close()
    assert len(started) == 1, "every caller waited for the one consumer being started"
    assert {tp: end for answer in answers for tp, end in answer.items()} == {tps[0]: 0, tps[1]: 4, tps[2]: 0}
    with pytest.raises(RuntimeError, match="closed"):
        await reader.end_offsets(tps)
    assert len(started) == 1
