"""The embedded broker's partition ends, as Faust's table recovery needs them.

Tansu answers ListOffsets(latest) with the last batch's base offset + 1; the
worker reads the true end from a fetch response too (`overrides/highwaters.py`).
"""

from __future__ import annotations

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from dispatcher.broker import EmbeddedBroker
from dispatcher.overrides.highwaters import fetched_highwaters
from tests.harness import create_topic, new_app_id


async def test_fetched_highwater_is_the_end_of_the_last_batch(broker: EmbeddedBroker) -> None:
    servers = broker.url.removeprefix("kafka://")
    topic = new_app_id()
    await create_topic(servers, topic, 3)
    full, single = TopicPartition(topic, 0), TopicPartition(topic, 1)
    producer = AIOKafkaProducer(bootstrap_servers=servers, linger_ms=100)
    await producer.start()
    try:
        # Sends queued before one flush leave in one batch per partition.
        first = [await producer.send(topic, b"x%d" % i, partition=0) for i in range(12)]
        await producer.flush()
        second = [await producer.send(topic, b"y%d" % i, partition=0) for i in range(5)]
        lone = await producer.send(topic, b"z", partition=1)
        await producer.flush()
        offsets = [(await f).offset for f in first + second]
        assert offsets == list(range(17))
        assert (await lone).offset == 0
    finally:
        await producer.stop()

    consumer = AIOKafkaConsumer(bootstrap_servers=servers)
    await consumer.start()
    try:
        listed = await consumer.end_offsets([full, single])
    finally:
        await consumer.stop()
    # What the broker's ListOffsets says: the last batch's base + 1 (the quirk this works around).
    assert listed[full] < 17

    reported = {tp: end for tp, end in listed.items() if end}
    exact = await fetched_highwaters(reported, bootstrap_servers=servers)
    assert exact == {full: 17, single: 1}
