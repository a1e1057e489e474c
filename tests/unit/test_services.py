"""The worker's background loops are services: each owns its task, and a stop ends it.

Every service here is started and stopped for real (mode's lifecycle); a
service that left a task running, or whose loop ignored the stop, fails the
leftover check (or the test's timeout).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from mode import Service

from dispatcher.deliverer import Deliverer, lane_limits
from dispatcher.domain.slots import SlotPool
from dispatcher.fence import Fence
from dispatcher.heap import HeapTrimmer, can_trim
from dispatcher.slow_lane import Pacer, SlowLane
from dispatcher.table_writer import ChangelogTable
from dispatcher.timers import PartitionTimers
from tests.harness import wait_until
from tests.unit.test_deliverer_faults import Answers200
from tests.unit.test_table_writer import Disk, Producer


@pytest.fixture
async def no_leftover_tasks() -> AsyncIterator[None]:
    before = asyncio.all_tasks()
    yield
    left = [t for t in asyncio.all_tasks() - before if not t.done() and t is not asyncio.current_task()]
    assert left == [], f"tasks still running after the stop: {left}"


def fast_sleep(calls: list[float]) -> Callable[[float], Awaitable[None]]:
    """An injected sleep that records what it was asked and yields at once."""

    async def sleep(seconds: float) -> None:
        calls.append(seconds)
        await asyncio.sleep(0)

    return sleep


async def stop(service: Service) -> None:
    await service.stop()
    assert service.should_stop


async def test_the_fence_ticks_through_its_injected_sleep_until_stopped(no_leftover_tasks: None) -> None:
    slept: list[float] = []
    fence = Fence(3.0, 2.0, sleep=fast_sleep(slept))
    await fence.start()
    await wait_until(lambda: len(slept) >= 3, 10.0, "three ticks", 0.005)
    await stop(fence)
    ticks = len(slept)
    await asyncio.sleep(0.01)
    assert len(slept) == ticks, "no tick after the stop"
    assert fence.allows()


@pytest.mark.skipif(not can_trim(), reason="this C library has no malloc_trim")
async def test_the_heap_trimmer_trims_on_its_interval_and_a_stop_ends_its_sleep(
    no_leftover_tasks: None,
) -> None:
    slept: list[float] = []
    fast = HeapTrimmer(60.0, sleep=fast_sleep(slept))
    await fast.start()
    await wait_until(lambda: fast.trims >= 2, 10.0, "two trims", 0.005)
    await stop(fast)
    assert set(slept) == {60.0}
    sleeper = HeapTrimmer(3600.0)  # mode's own sleep: the stop must end it, not the hour
    await sleeper.start()
    await stop(sleeper)
    assert sleeper.trims == 0


async def test_a_trimmer_set_to_never_starts_no_task(no_leftover_tasks: None) -> None:
    never = HeapTrimmer(0.0)
    await never.start()
    assert never.trims == 0
    await stop(never)


async def test_the_timers_fire_while_started_and_not_after(no_leftover_tasks: None) -> None:
    fired: list[str] = []

    async def fire(receiver_id: str, partition: int) -> None:
        fired.append(receiver_id)

    loop = asyncio.get_running_loop()
    timers = PartitionTimers(fire, clock=loop.time)
    await timers.start()
    timers.set("r1", 0, loop.time())
    await wait_until(lambda: fired == ["r1"], 10.0, "the due timer fired", 0.005)
    await stop(timers)
    timers.set("r2", 0, loop.time())
    await asyncio.sleep(0.05)
    assert fired == ["r1"]


async def test_the_slow_lane_needs_its_deliverer_and_stops_while_waiting_for_work(
    no_leftover_tasks: None,
) -> None:
    lane = SlowLane(Pacer(10.0))
    with pytest.raises(RuntimeError, match="deliverer"):
        await lane.start()
    await lane.stop()

    async def nowhere(*_: Any) -> None: ...

    lane = SlowLane(Pacer(10.0))
    pool: SlotPool[Any] = SlotPool(lane_limits(4, 1), 4, {})
    lane.deliverer = Deliverer(Answers200(), nowhere, pool, lambda *_: [], lambda *_: None)
    await lane.start()
    await stop(lane)
    await lane.deliverer.close()


async def test_the_changelog_sender_sends_what_piles_up_and_ends_at_stop(
    tmp_path: Path, no_leftover_tasks: None
) -> None:
    disk, producer = Disk(tmp_path), Producer()
    table = ChangelogTable(disk.table, linger=0.001, producer=lambda: producer)
    await table.start()
    table.put(0, b"s/a", b"1")
    await wait_until(lambda: len(producer.sent) == 1, 10.0, "the write handed to the producer", 0.005)
    await stop(table)
    table.put(0, b"s/b", b"2")
    await asyncio.sleep(0.01)
    assert len(producer.sent) == 1, "nothing is sent by a stopped sender"
    for db in disk.store._dbs.values():
        db.close()
