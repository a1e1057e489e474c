"""How far this worker has applied each requests partition, for reads that must see an accepted message.

`POST /v1/messages` answers once the broker has the record; the owner applies
it a moment later. A status read that finds no such message asks whether the
owner has applied the receiver's partition up to its end as of the read
(`Dispatcher.requests_applied`), and only then calls the message unknown.

`AppliedOffsets.mark` runs for every request record: a dict store, plus one
check of an empty dict while nobody waits. A partition's offsets are known from
the consumer's seek (after recovery: the committed offset, all below it in the
recovered table) until it moves (`forget`): a partition not owned any more never
answers from what it held.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable


class AppliedOffsets:
    """Per requests partition, the offset below which every record is applied here."""

    __slots__ = ("_next", "_waiting")

    def __init__(self) -> None:
        self._next: dict[int, int] = {}
        self._waiting: dict[int, list[tuple[int, asyncio.Future[bool]]]] = {}

    def mark(self, partition: int, offset: int) -> None:
        """The record at `offset` is applied (or dead-lettered): per record, so kept cheap."""
        self._next[partition] = offset + 1
        if self._waiting:
            self._wake(partition)

    def next_offset(self, partition: int) -> int | None:
        """The offset below which every record of the partition is applied; None: not known."""
        return self._next.get(partition)

    def positioned(self, partition: int, offset: int) -> None:
        """The consumer reads `partition` from `offset` next: every record below it is applied.

        May move back (a record read again): then this answers later, never too early.
        """
        self._next[partition] = offset
        if self._waiting:
            self._wake(partition)

    def forget(self, partitions: Iterable[int] | None = None) -> None:
        """Partitions moving (None: all): unknown until their next seek; their waiters get False."""
        moving = list(self._next.keys() | self._waiting.keys()) if partitions is None else list(partitions)
        for partition in moving:
            self._next.pop(partition, None)
            for _, waiter in self._waiting.pop(partition, ()):
                if not waiter.done():
                    waiter.set_result(False)

    async def reached(self, partition: int, end: int, limit: float) -> bool:
        """Wait (at most `limit` s) until every record below `end` is applied; False if not, or it moved."""
        if self._next.get(partition, -1) >= end:
            return True
        waiter: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        entry = (end, waiter)
        self._waiting.setdefault(partition, []).append(entry)
        try:
            async with asyncio.timeout(limit):
                return await waiter
        except TimeoutError:
            return False
        finally:
            self._unwait(partition, entry)

    def _wake(self, partition: int) -> None:
        waiters = self._waiting.get(partition)
        if not waiters:
            return
        applied = self._next.get(partition, -1)
        for end, waiter in waiters:
            if end <= applied and not waiter.done():
                waiter.set_result(True)

    def _unwait(self, partition: int, entry: tuple[int, asyncio.Future[bool]]) -> None:
        waiters = self._waiting.get(partition)
        if waiters is None:
            return
        if entry in waiters:
            waiters.remove(entry)
        if not waiters:
            del self._waiting[partition]


class SharedEnds:
    """A partition's true end as of a moment, one read shared by every caller that asked before it began.

    A read (ListOffsets corrected by a fetch: `overrides/highwaters.py`) builds
    a short-lived consumer; a burst of status reads of unknown ids shares one.
    """

    def __init__(self, read: Callable[[int], Awaitable[int]]) -> None:
        self._read = read
        self._reads: dict[int, tuple[float, asyncio.Task[int]]] = {}  # partition -> (began, read)

    async def end_after(self, partition: int, since: float) -> int:
        """The partition's end as of a moment after `since` (on `time.monotonic()`'s clock)."""
        current = self._reads.get(partition)
        if current is None or not _serves(current, since):
            current = (time.monotonic(), asyncio.ensure_future(self._read(partition)))
            self._reads[partition] = current
        return await asyncio.shield(current[1])


def _serves(read: tuple[float, asyncio.Task[int]], since: float) -> bool:
    """A read begun after `since` that is under way or succeeded (a failed one is not reused)."""
    began, task = read
    if began < since:
        return False
    return not task.done() or (not task.cancelled() and task.exception() is None)
