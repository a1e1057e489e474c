"""A record queued for one topic still leaves when the producer first sends to another topic.

aiokafka's client refreshes the metadata of the topics it tracks and forgets
the rest; a topic it knew from a refresh of all topics was never tracked, so
the first send to a new topic (the dead letters' topic, created on first use)
dropped it, and a record queued for it waited for the request timeout (20
minutes in Faust). `TopicTrackingProducer` tracks every topic it sends to.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from aiokafka.admin import AIOKafkaAdminClient

from dispatcher.broker import EmbeddedBroker
from dispatcher.overrides.producer import TopicTrackingProducer, _Producer
from dispatcher.settings import Settings
from dispatcher.topology import TOKEN_PARTITIONS, build_topology
from tests.harness import Api, WorkerProcess, create_topic, new_app_id

# The record must still be queued when the new topic's metadata arrives (a round trip on loopback).
LINGER_MS = 1000


def test_the_worker_produces_with_the_topic_tracking_producer() -> None:
    producer = build_topology(Settings(), []).app.producer
    assert isinstance(producer, _Producer) and producer._producer_type is TopicTrackingProducer


async def test_a_queued_record_leaves_when_the_producer_first_sends_to_a_new_topic(
    broker: EmbeddedBroker,
) -> None:
    servers = broker.url.removeprefix("kafka://")
    known, late = new_app_id(), new_app_id()
    await create_topic(servers, known, 2)
    # A request timeout well under the wait below: without the fix the record fails with it.
    producer = TopicTrackingProducer(
        bootstrap_servers=servers, linger_ms=LINGER_MS, request_timeout_ms=20_000
    )
    await producer.start()  # its first refresh is of all topics: `known` is known
    try:
        queued = await producer.send(known, b"queued", key=b"receiver")  # lingers in the queue
        await create_topic(servers, late, 2)  # as the broker creates the dead letters' topic
        await producer.send_and_wait(late, b"first")  # a refresh that asks for `late`
        sent = await asyncio.wait_for(queued, 60)
        assert (sent.topic, sent.offset) == (known, 0)
        # and the producer still sends to the first topic afterwards
        assert (await producer.send_and_wait(known, b"after", key=b"receiver")).topic == known
    finally:
        await producer.stop()


async def test_a_worker_declares_the_topics_it_only_produces_to_before_sending_there(
    make_module_worker: Callable[..., WorkerProcess], broker: EmbeddedBroker
) -> None:
    """The dead letters' and the subscriptions' topics get the app's partition count, and the tokens'
    its one partition, not whatever a broker's auto-create would give them (or refuse): a receiver
    created (its subscription record sent at once) or a token minted the moment the worker is ready
    must not have the broker make the topic."""
    worker = make_module_worker()
    await worker.wait_ready()
    api = Api(worker.url)
    try:
        await api.create_receiver("http://127.0.0.1:9/hook", id="at-once", event_types=["t.x"])
        assert (await api.call("POST", "/v1/tokens", {"tenant": "acme"}))[0] == 201
    finally:
        await api.close()
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.url.removeprefix("kafka://"))
    await admin.start()
    try:
        for name in ("dead-letters", "subscriptions"):
            [described] = await admin.describe_topics([f"{worker.app_id}.{name}"])
            partitions = {p["partition"] for p in described.get("partitions") or ()}
            assert partitions == set(range(Settings().partitions)), name
        [tokens] = await admin.describe_topics([f"{worker.app_id}.tokens"])
        assert {p["partition"] for p in tokens.get("partitions") or ()} == set(range(TOKEN_PARTITIONS))
    finally:
        await admin.close()
