"""A worker stopped cleanly leaves its consumer group, so the worker after it is not kept waiting.

The embedded broker numbers a group's first generation 0, from which aiokafka
never left; the next worker's join then waited out the stopped one's session
(the restart gap: docs/benchmarks.md, "Performance II").
"""

from __future__ import annotations

from typing import Any

from aiokafka.admin import AIOKafkaAdminClient

from dispatcher.broker import EmbeddedBroker


async def group_members(broker: EmbeddedBroker, group: str) -> list[str]:
    """The member ids the broker holds for the consumer group."""
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.url.removeprefix("kafka://"))
    await admin.start()
    try:
        [response] = await admin.describe_consumer_groups([group])
    finally:
        await admin.close()
    [described] = response.groups
    return [member[0] for member in described[5]]


async def test_a_worker_of_the_first_generation_leaves_its_group_on_sigterm(
    broker: EmbeddedBroker, make_worker: Any
) -> None:
    worker = make_worker("first")
    await worker.start().wait_ready()
    assert len(await group_members(broker, worker.app_id)) == 1
    worker.stop()  # SIGTERM, and wait for the exit
    assert worker.process.returncode == 0
    # Gone at once: not after its 6 s session, which the next worker's join used to wait out.
    assert await group_members(broker, worker.app_id) == []
    again = make_worker("again")
    await again.start().wait_ready()
    assert len(await group_members(broker, worker.app_id)) == 1
