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
import heapq
from collections.abc import Awaitable, Callable, Iterable


class AppliedOffsets:
    """Per requests partition, the offset below which every record is applied here."""

    __slots__ = ("_gave_up", "_next", "_tie", "_waiting")

    def __init__(self) -> None:
        self._next: dict[int, int] = {}
        # Per partition, a heap of (end, tie, waiter): a record wakes only the waiters it satisfies,
        # so a burst of readers costs each record O(log n), not a walk over all of them.
        self._waiting: dict[int, list[tuple[int, int, asyncio.Future[bool]]]] = {}
        self._gave_up: dict[int, int] = {}  # waiters that left since the heap was last swept
        self._tie = 0

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
            self._gave_up.pop(partition, None)
            for _, _, waiter in self._waiting.pop(partition, ()):
                if not waiter.done():
                    waiter.set_result(False)

    def waiting(self, partition: int) -> int:
        """Waiters still waiting on the partition (for tests and /readyz)."""
        return sum(not waiter.done() for _, _, waiter in self._waiting.get(partition, ()))

    async def reached(self, partition: int, end: int, limit: float) -> bool:
        """Wait (at most `limit` s) until every record below `end` is applied; False if not, or it moved."""
        if self._next.get(partition, -1) >= end:
            return True
        waiter: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._tie += 1
        heapq.heappush(self._waiting.setdefault(partition, []), (end, self._tie, waiter))
        try:
            async with asyncio.timeout(max(limit, 0.0)):
                return await waiter
        except TimeoutError:
            return False
        finally:
            if waiter.cancelled() or not waiter.done():  # the timeout cancels it with the wait
                waiter.cancel()
                self._left(partition)

    def _wake(self, partition: int) -> None:
        heap = self._waiting.get(partition)
        if not heap:
            return
        applied = self._next.get(partition, -1)
        while heap and heap[0][0] <= applied:
            _, _, waiter = heapq.heappop(heap)
            if not waiter.done():
                waiter.set_result(True)
        if not heap:
            del self._waiting[partition]
            self._gave_up.pop(partition, None)

    def _left(self, partition: int) -> None:
        """A waiter left before its end came: sweep the heap's dead entries once as many have left."""
        heap = self._waiting.get(partition)
        if heap is None:
            return
        left = self._gave_up.get(partition, 0) + 1
        if left * 2 < len(heap):
            self._gave_up[partition] = left
            return
        live = [entry for entry in heap if not entry[2].done()]
        heapq.heapify(live)
        self._gave_up.pop(partition, None)
        if live:
            self._waiting[partition] = live
        else:
            del self._waiting[partition]


class SharedEnds:
    """A partition's true end as of a moment after the caller asked, with one read at a time.

    A read (ListOffsets corrected by a fetch: `overrides/highwaters.py`) costs a
    short-lived consumer and tens of milliseconds, so at most one runs per
    partition. A caller that comes while one runs waits for the next, which
    starts when that one ends and serves every caller that came meanwhile: a
    burst of status reads of unknown ids costs two reads, not one each.
    """

    def __init__(self, read: Callable[[int], Awaitable[int]]) -> None:
        self._read = read
        self.reads = 0  # begun since start
        self._running: dict[int, asyncio.Task[int]] = {}
        self._after: dict[int, asyncio.Future[int]] = {}  # the read after the running one

    def reading(self, partition: int) -> bool:
        return partition in self._running

    async def end_after(self, partition: int) -> int:
        """The partition's end as read by a read that begins after this call."""
        if partition not in self._running:
            return await asyncio.shield(self._start(partition))
        after = self._after.get(partition)
        if after is None:
            after = self._after[partition] = asyncio.get_running_loop().create_future()
            after.add_done_callback(_retrieved)
        return await asyncio.shield(after)

    def _start(self, partition: int) -> asyncio.Task[int]:
        task = asyncio.ensure_future(self._read(partition))
        self.reads += 1
        self._running[partition] = task
        task.add_done_callback(lambda done: self._ended(partition, done))
        return task

    def _ended(self, partition: int, done: asyncio.Task[int]) -> None:
        _retrieved(done)
        del self._running[partition]
        after = self._after.pop(partition, None)
        if after is not None and not after.done():
            self._start(partition).add_done_callback(lambda task: _settle(after, task))


def _settle(future: asyncio.Future[int], task: asyncio.Task[int]) -> None:
    if future.done():
        return
    if task.cancelled():
        future.cancel()
    elif (exc := task.exception()) is not None:
        future.set_exception(exc)
    else:
        future.set_result(task.result())


def _retrieved(future: asyncio.Future[int]) -> None:
    """Mark a failure as seen: a read nobody awaits any more must not log 'never retrieved'."""
    if not future.cancelled():
        future.exception()
