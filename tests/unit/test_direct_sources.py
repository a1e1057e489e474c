"""The consumer applies the actor's records itself (`direct_sources`) with the stream's ack rules.

A real, unstarted Faust consumer of our app: acks, tracking and flow state are
its own; only the broker seek of the failure path is recorded instead of sent.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import pytest
from faust.types import TP
from faust.types.tuples import Message

from dispatcher.overrides.app import DispatcherApp
from dispatcher.settings import Settings
from dispatcher.worker import Dispatcher

SOURCE = "direct-source"
TOPIC_PARTITION = TP(SOURCE, 0)


@pytest.fixture
async def consumer() -> Any:
    app = DispatcherApp("direct-test", broker="kafka://127.0.0.1:9", store="memory://")
    app.topics.add(app.topic(SOURCE, key_type=bytes, value_type=bytes))  # acking, as consume.subscribe does
    await app.topics._update_indices()
    app.sensors.add(app.monitor)  # as the app's start does
    consumer = app.consumer
    consumer.resume_flow()
    app.flow_control.resume()
    consumer.REAPPLY_PAUSE = 0.0
    consumer.sought = []

    async def record_seek(partitions: Mapping[Any, int]) -> None:
        consumer.sought.append(dict(partitions))

    consumer.seek_wait = record_seek
    return consumer


def message(consumer: Any, offset: int) -> Message:
    app = consumer.app
    return Message(SOURCE, 0, offset, 0.0, 0, [], b"r1", b"{}", None, tp=TOPIC_PARTITION,
                   generation_id=app.consumer_generation_id)


def recording(consumer: Any, applied: list[int]) -> Callable[[Any], Awaitable[None]]:
    async def apply(msg: Any) -> None:
        assert msg in consumer._unacked_messages, "tracked while applied: a rebalance waits for it"
        assert not msg.acked
        applied.append(msg.offset)

    return apply


async def test_a_record_is_acked_once_applied(consumer: Any) -> None:
    applied: list[int] = []
    for offset in (0, 1, 2):
        assert await consumer._apply_direct(recording(consumer, applied), message(consumer, offset))
    assert applied == [0, 1, 2]
    assert list(consumer._acked[TOPIC_PARTITION]) == [0, 1, 2]
    assert not consumer._unacked_messages
    monitor = consumer.app.monitor
    assert monitor.messages_received_total == 3 and monitor.messages_active == 0
    assert TOPIC_PARTITION in monitor.stream_inbound_time  # else Faust logs the stream as idle


async def test_nothing_is_applied_while_the_flow_is_stopped_or_after_a_new_generation(consumer: Any) -> None:
    applied: list[int] = []
    apply = recording(consumer, applied)
    consumer.stop_flow()
    assert not await consumer._apply_direct(apply, message(consumer, 0))
    consumer.resume_flow()
    stale = message(consumer, 0)
    consumer.app.consumer_generation_id += 1
    assert not await consumer._apply_direct(apply, stale)
    assert applied == []
    assert not consumer._acked[TOPIC_PARTITION]
    assert await consumer._apply_direct(apply, message(consumer, 0))
    assert applied == [0]


async def test_a_record_whose_apply_raises_is_not_acked_and_is_read_again(consumer: Any) -> None:
    async def fail(msg: Any) -> None:
        raise RuntimeError("dead-letter topic unreachable")

    record = message(consumer, 7)
    assert not await consumer._apply_direct(fail, record)
    assert not record.acked
    assert not consumer._acked[TOPIC_PARTITION], "a commit must not pass it"
    assert record not in consumer._unacked_messages, "a rebalance must not wait for it forever"
    assert consumer.sought == [{TOPIC_PARTITION: 7}]


def test_the_worker_applies_requests_and_commands_directly(tmp_path: Any) -> None:
    """Subscribed through Faust's conductor, with acks, and no agent of their own."""
    settings = Settings(app_id="direct-wiring", data_dir=tmp_path)
    dispatcher = Dispatcher(settings)
    names = {dispatcher.names["requests"], dispatcher.names["commands"]}
    assert set(dispatcher.app.direct_sources) == names
    subscribed = {name for topic in dispatcher.app.topics for name in topic.topics}
    assert names <= subscribed
    agents = {name for agent in dispatcher.app.agents.values() for name in agent.channel.topics}  # type: ignore[attr-defined]
    assert not names & agents, "no agent stream reads them"
