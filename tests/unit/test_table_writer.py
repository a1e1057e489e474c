"""The actor table's write path on real RocksDB: the changelog first, RocksDB once the broker acked.

The store is Faust's own RocksDB store of a real app's table (never started);
aiokafka's producer is a stand-in, so each test decides when (and whether) a
changelog batch is acked.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import faust
import pytest
from faust.types import TP
from rocksdict import Rdict

from dispatcher.overrides.store import partition_db
from dispatcher.table_writer import ChangelogTable, StorageFailed
from tests.harness import wait_until


class Batch:
    def __init__(self, room: int) -> None:
        self.records: list[tuple[bytes, bytes | None]] = []
        self.room = room

    def append(self, key: bytes, value: bytes | None, timestamp: None) -> object | None:
        if len(self.records) == self.room:
            return None
        self.records.append((key, value))
        return object()


class Producer:
    """Hands out one future per batch; the test acks or fails them."""

    def __init__(self, room: int = 100) -> None:
        self.room = room
        self.sent: list[tuple[int, Batch, asyncio.Future[Any]]] = []
        self.offsets: dict[int, int] = {}

    def create_batch(self) -> Batch:
        return Batch(self.room)

    async def send_batch(self, batch: Batch, topic: str, partition: int) -> asyncio.Future[Any]:
        future = asyncio.get_running_loop().create_future()
        self.sent.append((partition, batch, future))
        return future

    def ack(self, index: int) -> None:
        partition, batch, future = self.sent[index]
        base = self.offsets.get(partition, 0)
        self.offsets[partition] = base + len(batch.records)
        future.set_result(SimpleNamespace(offset=base))


class Disk:
    """Faust's real RocksDB store of a real (never started) app's table, and what the tests read of it."""

    def __init__(self, root: Path) -> None:
        app = faust.App("table-writer-test", store="rocksdb://", datadir=str(root),
                        key_serializer="raw", value_serializer="raw")
        self.table = app.Table("actors", partitions=4, key_type=bytes, value_type=bytes)
        self.store = self.table.data
        self.topic = self.table.changelog_topic.get_topic_name()

    def db(self, partition: int) -> Any:
        return partition_db(self.store, partition)

    def persisted(self, partition: int) -> int | None:
        """The changelog offset the partition's RocksDB records it holds up to."""
        return self.store.persisted_offset(TP(self.topic, partition))

    def fail_writes(self, partition: int, failures: int) -> None:
        """Make the partition's next `failures` RocksDB batch writes raise (a full disk)."""
        self.store._dbs[partition] = FailingDb(self.db(partition), failures)


@pytest.fixture
def parts(tmp_path: Path) -> Iterator[tuple[ChangelogTable, Disk, Producer]]:
    disk, producer = Disk(tmp_path), Producer(room=2)
    yield ChangelogTable(disk.table, producer=lambda: producer), disk, producer
    for db in disk.store._dbs.values():
        db.close()


async def settle() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


async def test_a_write_reaches_rocksdb_only_once_its_batch_is_acked(parts) -> None:
    table, disk, producer = parts
    table.put(0, b"s/a", b"1")
    table.put(0, b"s/b", b"2")
    table.put(0, b"s/c", b"3")
    assert table.get(0, b"s/a") == b"1", "readable at once"
    await table._drain()
    assert len(producer.sent) == 2  # two records per batch
    db = disk.db(0)
    assert db.get(b"s/a") is None and disk.persisted(0) is None, "nothing on disk before the ack"

    producer.ack(0)
    await settle()
    assert (db.get(b"s/a"), db.get(b"s/b"), db.get(b"s/c")) == (b"1", b"2", None)
    assert disk.persisted(0) == 1, "the offset of the batch's last record"
    producer.ack(1)
    await settle()
    assert db.get(b"s/c") == b"3" and disk.persisted(0) == 2
    assert list(table.items(0, b"s/")) == [(b"s/a", b"1"), (b"s/b", b"2"), (b"s/c", b"3")]


async def test_an_older_ack_does_not_hide_a_newer_write(parts) -> None:
    table, disk, producer = parts
    table.put(0, b"s/a", b"old")
    await table._drain()
    table.put(0, b"s/a", b"new")
    await table._drain()
    producer.ack(0)
    await settle()
    assert disk.db(0).get(b"s/a") == b"old"
    assert table.get(0, b"s/a") == b"new", "the newer write, not yet acked, still wins"
    producer.ack(1)
    await settle()
    assert table.get(0, b"s/a") == b"new" and disk.db(0).get(b"s/a") == b"new"


async def test_writes_to_one_key_within_a_linger_go_out_as_the_newest_only(parts) -> None:
    table, disk, producer = parts
    table.put(0, b"b/1", b"payload")  # a message put in the backlog ...
    table.put(0, b"s/r", b"next=2")  # ... and the state that refers to it
    table.put(0, b"s/r", b"delivered=1")  # the result: the state again ...
    table.delete(0, b"b/1")  # ... then the settled message leaves the backlog
    table.put(0, b"a/1", b"attempt")
    await table._drain()
    sent = [record for _, batch, _ in producer.sent for record in batch.records]
    assert sent == [(b"s/r", b"delivered=1"), (b"b/1", None), (b"a/1", b"attempt")]
    producer.ack(0)
    producer.ack(1)
    await settle()
    db = disk.db(0)
    assert (db.get(b"s/r"), db.get(b"b/1"), db.get(b"a/1")) == (b"delivered=1", None, b"attempt")
    assert disk.persisted(0) == 2, "the offsets of the records sent"
    assert table.get(0, b"s/r") == b"delivered=1" and not table._unacked[0]


async def test_scans_merge_unacked_writes_and_deletes_in_key_order(parts) -> None:
    table, _, producer = parts
    for key in (b"s/b", b"s/d", b"t/a"):
        table.put(0, key, key)
    await table._drain()
    producer.ack(0)
    producer.ack(1)
    await settle()
    table.put(0, b"s/a", b"A")
    table.delete(0, b"s/b")
    table.put(0, b"s/c", b"C")
    table.put(0, b"s/d", b"D")
    assert list(table.items(0, b"s/")) == [(b"s/a", b"A"), (b"s/c", b"C"), (b"s/d", b"D")]
    assert list(table.items(0, b"s/", start=b"s/b")) == [(b"s/c", b"C"), (b"s/d", b"D")]
    assert list(table.items(0, b"t/")) == [(b"t/a", b"t/a")]


async def test_a_failed_batch_keeps_later_ones_out_of_rocksdb(parts) -> None:
    table, disk, producer = parts
    for key in (b"s/a", b"s/b", b"s/c"):
        table.put(0, key, key)
    await table._drain()
    producer.sent[0][2].set_exception(RuntimeError("broker gone"))
    producer.ack(1)
    await settle()
    db = disk.db(0)
    assert db.get(b"s/c") is None and disk.persisted(0) is None, "no write lands past a failed one"
    assert table.get(0, b"s/c") == b"s/c"
    with pytest.raises(RuntimeError, match="broker gone"):
        await table.flush()


async def test_flush_returns_once_everything_is_in_rocksdb(parts) -> None:
    table, disk, producer = parts
    table.put(1, b"s/a", b"1")

    async def broker() -> None:
        for _ in range(100):  # until the flush has sent its batch
            if producer.sent:
                break
            await asyncio.sleep(0)
        producer.ack(0)

    acking = asyncio.create_task(broker())
    await asyncio.wait_for(table.flush(), 5)
    await acking
    assert disk.db(1).get(b"s/a") == b"1" and disk.persisted(1) == 0
    assert table.get(1, b"s/a") == b"1"


class Encoded:
    """A value that gives its bytes when asked (as a receiver's state does), counting how often."""

    def __init__(self, raw: bytes) -> None:
        self.raw = raw
        self.encoded = 0

    def __bytes__(self) -> bytes:
        self.encoded += 1
        return self.raw


async def test_a_value_replaced_within_a_linger_is_never_encoded(parts) -> None:
    table, disk, producer = parts
    intake, outcome = Encoded(b"next=2"), Encoded(b"delivered=1")
    table.put(0, b"s/r", intake)
    table.put(0, b"s/r", outcome)
    assert table.get(0, b"s/r") == b"delivered=1", "a read before the send gets the bytes"
    await table._drain()
    producer.ack(0)
    await settle()
    assert intake.encoded == 0, "replaced before it was sent: never encoded"
    assert producer.sent[0][1].records == [(b"s/r", b"delivered=1")]
    assert disk.db(0).get(b"s/r") == b"delivered=1"
    assert list(table.items(0, b"s/")) == [(b"s/r", b"delivered=1")]


class Unencodable:
    def __bytes__(self) -> bytes:
        raise ValueError("str is not valid UTF-8: surrogates not allowed")


async def test_a_value_that_cannot_be_encoded_holds_back_no_other_write(parts) -> None:
    table, disk, producer = parts
    table.put(0, b"s/a", b"before")
    await table._drain()
    producer.ack(0)
    await settle()
    table.put(0, b"s/a", Unencodable())
    table.put(0, b"s/b", b"other")
    await table._drain()
    producer.ack(1)
    await settle()
    assert producer.sent[1][1].records == [(b"s/b", b"other")]
    assert table.get(0, b"s/b") == b"other"
    assert table.get(0, b"s/a") == b"before", "the key reads as it was before the bad write"
    assert disk.db(0).get(b"s/a") == b"before"


class FailingDb:
    """A partition's RocksDB whose next `failures` writes fail as a full disk does."""

    def __init__(self, db: Rdict, failures: int) -> None:
        self._db, self.failures = db, failures

    def write(self, batch: Any) -> None:
        if self.failures:
            self.failures -= 1
            raise Exception("IO error: No space left on device")  # what rocksdict raises
        self._db.write(batch)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)


def faulted(table: ChangelogTable) -> list[BaseException]:
    seen: list[BaseException] = []
    table._on_fault = seen.append
    return seen


async def test_a_rocksdb_write_that_fails_once_stops_the_table_for_good(parts) -> None:
    table, disk, producer = parts
    faults = faulted(table)
    table.put(0, b"s/a", b"1")
    disk.fail_writes(0, 1)
    await table._drain()
    producer.ack(0)
    await settle()
    assert len(faults) == 1 and "No space left" in str(faults[0])
    assert disk.persisted(0) is None, "no offset recorded for the lost write"
    for _ in range(2):  # for good: a later flush does not let a commit pass the lost write
        with pytest.raises(StorageFailed, match="No space left"):
            await table.flush()
    with pytest.raises(StorageFailed):
        table.put(0, b"s/b", b"2")
    assert len(faults) == 1, "told once"


async def test_a_changelog_send_refused_for_one_of_three_partitions_stops_the_table(parts) -> None:
    table, disk, producer = parts
    faults = faulted(table)
    for partition in (0, 1, 2):
        table.put(partition, b"s/a", b"%d" % partition)
    await table._drain()
    assert [p for p, _, _ in producer.sent] == [0, 1, 2]
    producer.ack(0)
    producer.sent[1][2].set_exception(RuntimeError("MessageSizeTooLargeError"))
    producer.ack(2)
    await settle()
    assert len(faults) == 1
    assert disk.db(0).get(b"s/a") == b"0" and disk.db(2).get(b"s/a") == b"2"
    assert disk.db(1).get(b"s/a") is None and disk.persisted(1) is None
    with pytest.raises(StorageFailed, match="MessageSizeTooLarge"):
        await table.flush()
    with pytest.raises(StorageFailed):
        table.delete(0, b"s/a")


async def test_a_send_that_raises_in_the_sender_task_stops_the_table(parts) -> None:
    table, _, producer = parts
    faults = faulted(table)

    async def refuse(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("producer closed")

    producer.send_batch = refuse  # type: ignore[method-assign]
    runner = asyncio.ensure_future(table.run())
    await settle()
    table.put(0, b"s/a", b"1")
    try:
        for _ in range(200):  # the sender lingers 5 ms before it sends
            if faults:
                break
            await asyncio.sleep(0.005)
    finally:
        runner.cancel()
    assert len(faults) == 1 and "producer closed" in str(faults[0])
    with pytest.raises(StorageFailed):
        await table.flush()


async def test_a_write_is_durable_once_the_batch_that_carries_it_or_its_successor_is_acked(parts) -> None:
    table, _, producer = parts
    table.put(0, b"s/r1", b"config")
    config_write = table.last_number
    table.put(0, b"s/r1", b"config+intake")  # coalesced with it: only this one is sent
    assert table.durable(0, config_write) is False, "still pending"
    await table._drain()
    assert [len(batch.records) for _, batch, _ in producer.sent] == [1]
    table.put(0, b"s/r1", b"later")  # pending, but newer than what is waited for
    assert table.durable(0, config_write) is False, "sent, not acked"
    producer.ack(0)
    await settle()
    assert table.durable(0, config_write) is True, "the successor write carrying it is acked"
    assert table.durable(0, table.last_number) is False
    table.discard_unsent()
    assert table.durable(0, table.last_number) is None, "dropped: it never will be"


class SlowFailingProducer(Producer):
    """Partition 0's batches are acked at once; partition 1's send waits for `release`, then raises."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()

    async def send_batch(self, batch: Batch, topic: str, partition: int) -> asyncio.Future[Any]:
        if partition == 1:
            await self.release.wait()
            raise RuntimeError("KafkaTimeoutError: buffer full for request_timeout_ms")
        future = await super().send_batch(batch, topic, partition)
        self.ack(len(self.sent) - 1)
        return future


async def test_a_drain_left_running_by_a_stop_still_fails_the_table_when_its_send_fails(
    tmp_path: Path,
) -> None:
    """A stop cancels the sender's task mid-drain; the shielded drain goes on, and its failure must
    reach the final flush (else the commit passes writes that never reached the changelog)."""
    disk, producer = Disk(tmp_path), SlowFailingProducer()
    table = ChangelogTable(disk.table, linger=0.0, producer=lambda: producer)
    faults = faulted(table)
    await table.start()
    table.put(0, b"s/a", b"0")
    table.put(1, b"s/a", b"1")
    await wait_until(lambda: bool(producer.sent), 10.0, "partition 0's batch sent", 0.005)
    await table.stop()
    producer.release.set()
    with pytest.raises(StorageFailed):
        await table.flush()
    assert len(faults) == 1 and "KafkaTimeoutError" in str(faults[0])
    assert table.durable(1, table.last_number) is None, "a failed table promises nothing"
    for db in disk.store._dbs.values():
        db.close()


def filter_bits_per_key(db: Any) -> float:
    """Bits of Bloom filter per key over the database's table files (RocksDB's own table properties)."""
    props = dict(part.strip().split("=", 1) for part in
                 db.property_value("rocksdb.aggregated-table-properties").split(";") if "=" in part)
    return int(props["filter block size"]) * 8 / int(props["# entries for filter"])


async def test_table_files_get_whole_file_bloom_filters_of_ten_bits_a_key(parts) -> None:
    # Faust's own: block-based filters of 3 bits a key, so a quarter of the dedup lookups of new
    # message ids (misses) went on to read the files' index and data blocks.
    table, disk, producer = parts
    producer.room = 10_000
    for n in range(5_000):
        table.put(0, b"d/%08d" % n, b"x" * 40)
    await table._drain()
    producer.ack(0)
    await settle()
    db = disk.db(0)
    db.flush()  # the memtable into a table file, with its filter
    assert db.get(b"d/%08d" % 4_999) == b"x" * 40
    assert 9.5 <= filter_bits_per_key(db) <= 10.5
