"""How far each requests partition is applied, and the shared read of a partition's end."""

from __future__ import annotations

import asyncio

import pytest

from dispatcher.applied import AppliedOffsets, SharedEnds


async def test_a_wait_ends_once_every_record_below_the_end_is_applied() -> None:
    applied = AppliedOffsets()
    applied.positioned(0, 10)  # recovered: read from the committed offset 10
    assert await applied.reached(0, 10, 0.0), "everything below the committed offset is in the table"
    waiting = asyncio.ensure_future(applied.reached(0, 12, 30.0))
    await asyncio.sleep(0)
    applied.mark(0, 10)
    applied.mark(1, 50)  # another partition's progress says nothing about this one
    await asyncio.sleep(0)
    assert not waiting.done(), "offset 11 is not applied yet"
    applied.mark(0, 11)
    assert await waiting


async def test_an_unknown_partition_is_not_caught_up_and_a_wait_runs_out_without_a_trace() -> None:
    applied = AppliedOffsets()
    assert not await applied.reached(3, 0, 0.01), "not positioned since it came here: not known"
    assert not applied._waiting, "a wait that ran out leaves nothing behind"


async def test_a_seek_back_makes_a_wait_longer_never_shorter() -> None:
    applied = AppliedOffsets()
    applied.mark(0, 20)
    applied.positioned(0, 15)  # read again from 15
    waiting = asyncio.ensure_future(applied.reached(0, 21, 30.0))
    applied.mark(0, 15)
    await asyncio.sleep(0)
    assert not waiting.done()
    applied.mark(0, 20)
    assert await waiting


async def test_partitions_that_move_answer_false_and_stay_unknown_until_their_next_seek() -> None:
    applied = AppliedOffsets()
    for partition in (0, 1):
        applied.positioned(partition, 5)
    moving = asyncio.ensure_future(applied.reached(0, 9, 30.0))
    kept = asyncio.ensure_future(applied.reached(1, 9, 30.0))
    await asyncio.sleep(0)
    applied.forget([0])
    assert await moving is False
    assert not kept.done()
    assert not await applied.reached(0, 5, 0.01), "nothing held from before the move answers"
    applied.forget()  # a revocation: every partition
    assert await kept is False
    applied.positioned(1, 9)
    assert await applied.reached(1, 9, 0.0)


async def test_a_burst_of_callers_costs_two_reads_one_at_a_time() -> None:
    """One read runs per partition; everyone who came while it ran shares the next, begun after them."""
    reads: list[asyncio.Future[int]] = []
    running = 0
    most = 0

    async def read(partition: int) -> int:
        nonlocal running, most
        running += 1
        most = max(most, running)
        reads.append(asyncio.get_running_loop().create_future())
        try:
            return await reads[-1]
        finally:
            running -= 1

    ends = SharedEnds(read)
    first = asyncio.ensure_future(ends.end_after(0))
    await asyncio.sleep(0)
    burst = [asyncio.ensure_future(ends.end_after(0)) for _ in range(200)]  # all came after it began
    for _ in range(3):
        await asyncio.sleep(0)
    assert len(reads) == 1, "the second read waits for the first"
    reads[0].set_result(7)
    assert await first == 7
    for _ in range(3):
        await asyncio.sleep(0)
    assert len(reads) == 2 and not any(t.done() for t in burst), "the burst waits for a read begun after it"
    reads[1].set_result(9)
    assert await asyncio.gather(*burst) == [9] * 200
    assert most == 1 and not ends.reading(0)


async def test_a_failed_read_is_not_reused() -> None:
    calls = 0

    async def read(partition: int) -> int:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ConnectionError("broker gone")
        return 4

    ends = SharedEnds(read)
    with pytest.raises(ConnectionError):
        await ends.end_after(0)
    assert await ends.end_after(0) == 4 and calls == 2


async def test_waiters_wake_by_their_own_end_and_those_that_gave_up_are_dropped() -> None:
    applied = AppliedOffsets()
    applied.positioned(0, 0)
    low = asyncio.ensure_future(applied.reached(0, 3, 5.0))
    high = asyncio.ensure_future(applied.reached(0, 10, 5.0))
    gave_up = [asyncio.ensure_future(applied.reached(0, 50, 0.0)) for _ in range(100)]
    assert await asyncio.gather(*gave_up) == [False] * 100
    assert applied.waiting(0) == 2  # the ones still waiting; the dead entries do not pile up
    applied.mark(0, 2)  # offsets 0..2 applied: end 3 reached
    await asyncio.sleep(0)
    assert low.done() and await low is True and not high.done()
    applied.mark(0, 9)
    assert await high is True
    assert applied.waiting(0) == 0
