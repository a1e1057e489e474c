"""The actor table's reads and writes: RocksDB at once, the changelog in batches per partition.

Faust writes a table key by key: each write makes a FutureMessage, goes
through its producer buffer and `publish_message` to aiokafka, and when acked
writes the changelog offset into RocksDB again. At several writes per
delivery that was most of the worker's CPU. Here a write goes to the
partition's RocksDB at once and its changelog record into a per-partition
list; a sender task turns whatever has piled up into record batches, handed
to aiokafka in write order (one batch in flight per partition keeps the
order), and the consumer's commit waits for them (`flush`), so offsets are
still never committed ahead of the writes they caused. The changelog offset
is stored once per flush, not per record.

The partition is given by the caller (the receiver's partition), so a write
need not run inside the stream's iteration.

RocksDB writes skip its write-ahead log. The changelog is the durable copy:
after an unclean stop the local tables are dropped and rebuilt from it
(`worker.prepare_data_dir`), so the log only cost a write per put. What an
unlogged store keeps on disk is a prefix of its writes, flushed memtable by
memtable, and the changelog offset it records is written after the records
it covers; so after a clean stop whose last memtable was not flushed, the
recovery reads more of the changelog and nothing is lost.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import rocksdict
from faust.types import TP

log = logging.getLogger(__name__)

Record = tuple[bytes, bytes | None]  # key, value (None: a delete)
LINGER = 0.005  # seconds writes pile up before they are sent: fewer, larger produce requests


def _unlogged() -> rocksdict.WriteOptions:
    options = rocksdict.WriteOptions()
    options.disable_wal = True
    return options


def open_unlogged(store: Any) -> None:
    """Make every RocksDB the store opens (Faust's recovery included) write without the WAL."""
    options = store.rocksdb_options
    open_db = options.open

    def open_without_wal(path: Any, *, read_only: bool = False) -> Any:
        db = open_db(path, read_only=read_only)
        db.set_write_options(_unlogged())
        return db

    options.open = open_without_wal


class ChangelogTable:
    def __init__(self, table: Any) -> None:
        self._table = table
        open_unlogged(table.data)
        self._pending: dict[int, list[Record]] = {}
        self._last: dict[int, tuple[asyncio.Future[Any], int]] = {}  # newest batch per partition
        self._lock: asyncio.Lock | None = None  # one drain at a time keeps each partition's order
        self._wakeup: asyncio.Event | None = None
        self._error: BaseException | None = None

    @property
    def _store(self) -> Any:
        return self._table.data

    def db(self, partition: int) -> Any:
        """The partition's RocksDB (opened on first use)."""
        return self._store._db_for_partition(partition)  # Faust has no public per-partition access

    def get(self, partition: int, key: bytes) -> bytes | None:
        db = self._store._dbs.get(partition)  # a partition not held here has no entries
        return None if db is None else db.get(key)

    def put(self, partition: int, key: bytes, value: bytes) -> None:
        self.db(partition).put(key, value)
        self._queue(partition, key, value)

    def delete(self, partition: int, key: bytes) -> None:
        self.db(partition).delete(key)
        self._queue(partition, key, None)

    def _queue(self, partition: int, key: bytes, value: bytes | None) -> None:
        self._pending.setdefault(partition, []).append((key, value))
        if self._wakeup is not None:
            self._wakeup.set()

    async def run(self) -> None:
        """Send what piles up, as it piles up (the app's background task)."""
        self._wakeup = asyncio.Event()
        while True:
            await self._wakeup.wait()
            await asyncio.sleep(LINGER)
            self._wakeup.clear()
            try:
                await self._drain()
            except Exception as exc:  # flush raises it, so nothing is committed past it
                log.exception("changelog send failed")
                self._error = exc

    async def flush(self) -> None:
        """Send everything written so far and wait until the broker has it; store the offsets."""
        await self._drain()
        topic = self._table.changelog_topic.get_topic_name()
        for partition, (fut, count) in list(self._last.items()):
            metadata = await fut  # raises if the batch failed
            if self._last.get(partition, (None, 0))[0] is fut:
                del self._last[partition]
            if partition in self._store._dbs:
                self._store.set_persisted_offset(TP(topic, partition), metadata.offset + count - 1)
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    async def _drain(self) -> None:
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            while self._pending:
                pending, self._pending = self._pending, {}
                producer = self._table.app.producer._producer  # aiokafka's, started with the app
                topic = self._table.changelog_topic.get_topic_name()
                for partition, records in pending.items():
                    await self._send(producer, topic, partition, records)

    async def _send(self, producer: Any, topic: str, partition: int, records: list[Record]) -> None:
        batch, count = producer.create_batch(), 0
        for key, value in records:
            if batch.append(key=key, value=value, timestamp=None) is None:
                if count:  # full: send it and start the next
                    sent = await producer.send_batch(batch, topic, partition=partition)
                    self._last[partition] = (sent, count)
                    batch, count = producer.create_batch(), 0
                if batch.append(key=key, value=value, timestamp=None) is None:  # too large even alone
                    raise ValueError(f"a changelog record of {len(value or b'')} bytes does not fit a batch")
            count += 1
        if count:
            self._last[partition] = (await producer.send_batch(batch, topic, partition=partition), count)
