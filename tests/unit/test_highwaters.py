"""The fetched-highwater probe never takes table recovery down: a probe that fails keeps ListOffsets' ends."""

from __future__ import annotations

import logging

import pytest
from aiokafka import TopicPartition

from dispatcher.broker import free_port
from dispatcher.overrides.highwaters import fetched_highwaters


async def test_a_broker_that_cannot_be_reached_leaves_the_listed_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ends = {TopicPartition("t", 0): 12, TopicPartition("t", 1): 3}
    closed = f"127.0.0.1:{free_port()}"  # nothing listens there
    with caplog.at_level(logging.WARNING, logger="dispatcher.overrides.highwaters"):
        found = await fetched_highwaters(ends, limit=5.0, bootstrap_servers=closed, request_timeout_ms=1000)
    assert found == ends
    assert "keeping ListOffsets' ends" in caplog.text


async def test_nothing_to_probe_is_answered_at_once() -> None:
    assert await fetched_highwaters({}, bootstrap_servers="127.0.0.1:1") == {}
