"""How far each requests partition is applied, and the shared read of a partition's end."""

from __future__ import annotations

import asyncio
import time

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


async def test_callers_that_asked_before_a_read_began_share_it_later_ones_get_a_new_one() -> None:
    reads: list[asyncio.Future[int]] = []

    async def read(partition: int) -> int:
        reads.append(asyncio.get_running_loop().create_future())
        return await reads[-1]

    ends = SharedEnds(read)
    first = [asyncio.ensure_future(ends.end_after(0, time.monotonic())) for _ in range(3)]
    await asyncio.sleep(0)
    late = asyncio.ensure_future(ends.end_after(0, time.monotonic()))  # came in after the read began
    for _ in range(3):  # the late caller's turn, then its read's
        await asyncio.sleep(0)
    assert len(reads) == 2, "one read for the three that came before it, one for the late caller"
    reads[0].set_result(7)
    assert await asyncio.gather(*first) == [7, 7, 7]
    reads[1].set_result(9)
    assert await late == 9


async def test_a_failed_read_is_not_reused() -> None:
    calls = 0

    async def read(partition: int) -> int:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ConnectionError("broker gone")
        return 4

    ends = SharedEnds(read)
    since = time.monotonic()
    with pytest.raises(ConnectionError):
        await ends.end_after(0, since)
    assert await ends.end_after(0, since) == 4 and calls == 2
