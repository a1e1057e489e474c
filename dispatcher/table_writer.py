"""The actor table's reads and writes: the changelog first, RocksDB once the broker has it.

Faust writes a table key by key: each write makes a FutureMessage, goes
through its producer buffer and `publish_message` to aiokafka, and when acked
writes the changelog offset into RocksDB again. At several writes per
delivery that was most of the worker's CPU. Here a write goes into an
in-memory overlay of the partition and its changelog record into a
per-partition list; a sender task turns whatever has piled up into record
batches, handed to aiokafka in write order (one partition's batches are
acked in order), and the consumer's commit waits for them (`flush`), so
offsets are never committed ahead of the writes they caused.

Writes to one key that pile up within a linger are sent as the newest one
alone (`newest_writes`). A value may be an object that gives its bytes
(`bytes(value)`, a receiver's state): it is encoded only if it is sent (or
read before), so a state saved at intake and again at the outcome within one
linger is encoded once.

A batch reaches RocksDB only once the broker has acked it, with the changelog
offset it ends at; reads and scans see the overlay first. So a local store
never holds a write its changelog lacks, and what is on disk after a kill -9
is a prefix of the changelog up to the offset it records: the next start
keeps it and reads only the changelog's tail (Faust's recovery from the
stored offset), instead of rebuilding every receiver from the whole changelog.

A write that fails (a changelog batch the broker refuses, a RocksDB write on a
full disk) stops the table for good: every later write and flush raises
`StorageFailed` and `on_fault` is told, so the worker stops instead of going
on with a hole. No offset is committed past the lost write, and the next owner
rebuilds the partitions from the changelog.

RocksDB writes skip its write-ahead log for the same reason: the changelog
is the durable copy. An unlogged store keeps on disk a prefix of its writes
(memtables are flushed in order), and a prefix is all the recovery needs.

The partition is given by the caller (the receiver's partition), so a write
need not run inside the consumer's fetch loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import count
from typing import Any, SupportsBytes

import rocksdict
from faust.types import TP
from mode import Service

from .overrides.store import aiokafka_producer, held_db, open_unlogged, partition_db

log = logging.getLogger(__name__)

Value = bytes | SupportsBytes  # bytes, or what gives them once the write is sent
Record = tuple[bytes, Value | None, int]  # key, value (None: a delete), write number
LINGER = 0.005  # seconds writes pile up before they are sent: fewer, larger produce requests


class WriteRefused(RuntimeError):
    """A table write this worker may not make; the record that wanted it is read again later."""


class StorageFailed(WriteRefused):
    """The actor table lost a write: nothing more may be applied or committed on this worker."""


class Fenced(WriteRefused):
    """This worker's ownership is in doubt (see `domain/stall_fence.py`): no write until confirmed."""


def _ignore_fault(exc: BaseException) -> None:
    return None


def _ignore_time(seconds: float) -> None:
    return None


def _always() -> bool:
    return True


@dataclass(slots=True)
class _Sent:
    """A changelog batch handed to the producer, and the writes it carries."""

    future: asyncio.Future[Any]
    records: list[Record]
    low: int = 0  # the lowest write number it answers for (writes coalesced into it included)


class ChangelogTable(Service):
    """The table's overlay and changelog writes; once started, a task sends what piles up."""

    def __init__(
        self, table: Any, linger: float = LINGER, on_fault: Callable[[BaseException], None] = _ignore_fault,
        may_write: Callable[[], bool] = _always, producer: Callable[[], Any] | None = None,
    ) -> None:
        super().__init__()
        self._table = table
        # aiokafka's producer (started with the app), or one a test acks by hand
        self._producer = producer or (lambda: aiokafka_producer(table.app))
        self._on_fault = on_fault
        # The stall fence: while ownership is in doubt nothing is sent or flushed (the runner
        # checks it before each command, so no command is applied in part).
        self._may_write = may_write
        self._linger = linger
        open_unlogged(table.data)
        self._pending: dict[int, list[Record]] = {}  # written, not handed to the producer yet
        self._sent: dict[int, deque[_Sent]] = {}  # handed to the producer, not in RocksDB yet; oldest first
        # partition -> key -> (write number, value) of its newest write not in RocksDB yet
        self._unacked: dict[int, dict[bytes, tuple[int, Value | None]]] = {}
        self._numbers = count(1)
        self.last_number = 0  # the number of the newest write so far
        self._dropped: dict[int, int] = {}  # partition -> highest write number dropped unsent
        self._lock: asyncio.Lock | None = None  # one drain at a time keeps each partition's order
        self._wakeup: asyncio.Event | None = None
        self._fault: BaseException | None = None  # the first lost write; set for good
        self.ack_seconds: Callable[[float], None] = _ignore_time  # a batch's send to ack (/metrics)

    @property
    def failed(self) -> bool:
        return self._fault is not None

    def _fail(self, exc: BaseException) -> None:
        if self._fault is None:
            self._fault = exc
            log.critical("an actor table write failed (%s: %s): the worker stops; the next owner "
                         "rebuilds its partitions from the changelog", type(exc).__name__, exc)
            self._on_fault(exc)

    def _check(self) -> None:
        if self._fault is not None:
            raise StorageFailed(f"the actor table lost a write: {self._fault}") from self._fault

    @property
    def _store(self) -> Any:
        return self._table.data

    def _db(self, partition: int) -> Any:
        """The partition's RocksDB (opened on first use)."""
        return partition_db(self._store, partition)

    def get(self, partition: int, key: bytes) -> bytes | None:
        unacked = self._unacked.get(partition)
        if unacked:
            newest = unacked.get(key)
            if newest is not None:
                return _encoded(newest[1])
        db = held_db(self._store, partition)  # a partition not held here has no entries
        return None if db is None else db.get(key)

    def durable(self, partition: int, number: int) -> bool | None:
        """Has the broker acked every write of the partition numbered up to `number` (so a successor
        recovers them)? None: one of them was dropped unsent, and never will be; or the table lost a
        write (`failed`), and nothing more is promised."""
        if self._fault is not None or self._dropped.get(partition, 0) >= number:
            return None
        if any(n <= number for _, _, n in self._pending.get(partition, ())):
            return False
        return all(sent.low > number or (sent.future.done() and not sent.future.cancelled()
                                         and sent.future.exception() is None)
                   for sent in self._sent.get(partition, ()))

    def items(
        self, partition: int, prefix: bytes, start: bytes | None = None
    ) -> Iterator[tuple[bytes, bytes]]:
        """The partition's entries under `prefix` from `start` on, in key order, the overlay's included."""
        low = max(start or prefix, prefix)
        stored = self._db(partition).items(from_key=low)
        unacked = self._unacked.get(partition)
        if not unacked:
            yield from _under(stored, prefix)
            return
        newer = sorted((key, _encoded(value)) for key, (_, value) in unacked.items()
                       if key >= low and key.startswith(prefix))
        yield from _merged(_under(stored, prefix), newer)

    def put(self, partition: int, key: bytes, value: Value) -> None:
        self._write(partition, key, value)

    def delete(self, partition: int, key: bytes) -> None:
        self._write(partition, key, None)

    def _write(self, partition: int, key: bytes, value: Value | None) -> None:
        self._check()
        self._db(partition)  # open now: the acked batch is stored where this worker holds the partition
        number = self.last_number = next(self._numbers)
        self._unacked.setdefault(partition, {})[key] = (number, value)
        self._pending.setdefault(partition, []).append((key, value, number))
        if self._wakeup is not None:
            self._wakeup.set()

    async def on_start(self) -> None:
        self.add_future(self.run())

    async def run(self) -> None:
        """Send what piles up, as it piles up, until the service stops (or the task is cancelled)."""
        self._wakeup = asyncio.Event()
        if self._pending:
            self._wakeup.set()  # written before this task ran
        while not self.should_stop:
            await self._wakeup.wait()
            await asyncio.sleep(self._linger)
            self._wakeup.clear()
            try:
                # Shielded: a stop that cancels this task mid-drain must not drop the writes taken
                # off `_pending` but not yet handed to the producer (the last flush would miss them).
                await asyncio.shield(self._drain())
            except Exception as exc:  # noqa: BLE001 - every flush raises it from now on
                self._fail(exc)

    async def flush(self) -> None:
        """Send everything written so far and wait until the broker has it and RocksDB holds it."""
        self._check()
        if not self._may_write():
            raise Fenced("ownership in doubt after a stall: nothing is committed until it is confirmed")
        try:
            await self._drain()
            for partition, sent in list(self._sent.items()):
                for batch in list(sent):
                    if batch.future.cancelled():
                        raise StorageFailed("a changelog send was cancelled")
                    await batch.future  # raises if the batch failed
                self._store_acked(partition)
        except Exception as exc:  # noqa: BLE001 - raised below as StorageFailed, for good
            self._fail(exc)
        self._check()

    def discard_unsent(self) -> None:
        """Drop every write not yet handed to the producer: a fenced worker's partitions are being
        reassigned, and the records that made these writes were never committed (read again)."""
        for partition, records in self._pending.items():
            unacked = self._unacked.get(partition, {})
            for key, _, number in records:
                if unacked.get(key, (0, None))[0] == number:
                    del unacked[key]
            self._drop(partition, max(number for _, _, number in records))
        self._pending.clear()

    def _drop(self, partition: int, upto: int) -> None:
        self._dropped[partition] = max(self._dropped.get(partition, 0), upto)

    def forget_partitions(self, partitions: set[int]) -> None:
        """Partitions handed over (after the flush that precedes it): their overlay is the next owner's."""
        for partition in partitions:
            self._unacked.pop(partition, None)
            self._sent.pop(partition, None)
            self._drop(partition, self.last_number)

    async def _drain(self) -> None:
        """Hand what is pending to the producer, in order; a failure stops the table for good here,
        whoever awaits it (the sender's task may be gone: a stop cancels it, the drain goes on)."""
        try:
            await self._drain_pending()
        except Exception as exc:
            self._fail(exc)
            raise

    async def _drain_pending(self) -> None:
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            while self._pending and self._may_write():  # fenced: held until ownership is known
                pending, self._pending = self._pending, {}
                producer = self._producer()
                topic = self._table.changelog_topic.get_topic_name()
                for partition, records in pending.items():
                    if not self._may_write():  # fenced meanwhile: the rest waits, in order
                        self._hold(pending, partition)
                        return
                    low = min(number for _, _, number in records)
                    await self._send(producer, topic, partition, self._sendable(partition, records), low)

    def _hold(self, pending: dict[int, list[Record]], first: int) -> None:
        """Put back the writes of `first` and the partitions after it, before any written since."""
        keys = list(pending)
        held = {p: pending[p] for p in keys[keys.index(first):]}
        for partition, records in self._pending.items():
            held[partition] = held.get(partition, []) + records
        self._pending = held

    def _sendable(self, partition: int, records: list[Record]) -> list[Record]:
        """The newest writes with their values as bytes. One that cannot be encoded is logged and left
        out (its key reads as before it), so it cannot hold back the writes of every other receiver."""
        sendable: list[Record] = []
        for key, value, number in newest_writes(records):
            try:
                sendable.append((key, _encoded(value), number))
            except Exception:
                # A bug of ours, not a storage fault: stopping would make the record that wrote it a
                # poison that stops every restart; the rest goes on (the key reads as before it).
                log.exception("a table write cannot be encoded, key %r: left out", key[:80])
                self._drop(partition, number)
                unacked = self._unacked.get(partition, {})
                if unacked.get(key, (0, None))[0] == number:
                    del unacked[key]
        return sendable

    async def _send(
        self, producer: Any, topic: str, partition: int, records: list[Record], low: int = 0
    ) -> None:
        batch, taken = producer.create_batch(), 0
        for n, (key, value, _) in enumerate(records):
            if batch.append(key=key, value=value, timestamp=None) is None:
                if n > taken:  # full: send it and start the next
                    await self._send_batch(producer, topic, partition, batch, records[taken:n], low)
                    batch, taken = producer.create_batch(), n
                if batch.append(key=key, value=value, timestamp=None) is None:  # too large even alone
                    size = len(_encoded(value) or b"")
                    raise ValueError(f"a changelog record of {size} bytes does not fit a batch")
        if len(records) > taken:
            await self._send_batch(producer, topic, partition, batch, records[taken:], low)

    async def _send_batch(
        self, producer: Any, topic: str, partition: int, batch: Any, records: list[Record], low: int = 0
    ) -> None:
        future = await producer.send_batch(batch, topic, partition=partition)
        self._sent.setdefault(partition, deque()).append(_Sent(future, records, low))
        sent_at = time.monotonic()
        future.add_done_callback(lambda done: self._on_acked(partition, done, sent_at))

    def _on_acked(self, partition: int, future: asyncio.Future[Any], sent_at: float = 0.0) -> None:
        if sent_at:
            self.ack_seconds(time.monotonic() - sent_at)
        try:
            if future.cancelled():
                raise StorageFailed("a changelog send was cancelled")
            if future.exception() is not None:
                raise future.exception()  # type: ignore[misc]
            if self._may_write():  # in doubt, acked batches wait: the partition may be another's now
                self._store_acked(partition)
        except Exception as exc:  # noqa: BLE001 - a refused batch, or RocksDB refused the acked one
            self._fail(exc)

    def _store_acked(self, partition: int) -> None:
        """Write the partition's acked batches to RocksDB, oldest first, with the offset they end at.

        A failed batch stops it there: nothing after it may reach RocksDB
        before it (flush raises its error, so no offset is committed past it).
        """
        sent = self._sent.get(partition)
        db = held_db(self._store, partition)
        if not sent or db is None:
            return
        unacked = self._unacked.get(partition, {})
        writes, end = rocksdict.WriteBatch(raw_mode=True), None
        while sent and sent[0].future.done():
            future = sent[0].future
            if future.cancelled() or future.exception() is not None:
                break
            records = sent.popleft().records
            for key, value, number in records:
                if value is None:
                    writes.delete(key)
                else:
                    writes.put(key, value)
                newest = unacked.get(key)
                if newest is not None and newest[0] == number:  # no newer write is waiting
                    del unacked[key]
            end = future.result().offset + len(records) - 1
        if end is not None:
            db.write(writes)
            topic = self._table.changelog_topic.get_topic_name()
            self._store.set_persisted_offset(TP(topic, partition), end)


def newest_writes(records: list[Record]) -> list[Record]:
    """Only the last write of each key, in write order.

    The changelog is read back last-write-wins, so an overwritten record
    carries nothing: a state saved at intake and again at the result, or a
    message put in the backlog and deleted before the linger ran out, goes
    to the broker and RocksDB once. Every kept record keeps its place
    relative to the others, so a record a kept state refers to still comes
    before it (the actor writes referents first).
    """
    last = {key: n for n, (key, _, _) in enumerate(records)}
    if len(last) == len(records):
        return records
    return [record for n, record in enumerate(records) if last[record[0]] == n]


def _encoded(value: Value | None) -> bytes | None:
    return value if value is None or type(value) is bytes else bytes(value)


def _under(items: Any, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
    for key, value in items:
        if not key.startswith(prefix):
            return
        yield key, value


def _merged(
    stored: Iterator[tuple[bytes, bytes]], newer: list[tuple[bytes, bytes | None]]
) -> Iterator[tuple[bytes, bytes]]:
    """Two key-ordered runs as one; on the same key the newer value wins, and None hides the key."""
    pending = iter(newer)
    new = next(pending, None)
    for key, value in stored:
        while new is not None and new[0] < key:
            if new[1] is not None:
                yield new[0], new[1]
            new = next(pending, None)
        if new is not None and new[0] == key:
            if new[1] is not None:
                yield key, new[1]
            new = next(pending, None)
        else:
            yield key, value
    while new is not None:
        if new[1] is not None:
            yield new[0], new[1]
        new = next(pending, None)
