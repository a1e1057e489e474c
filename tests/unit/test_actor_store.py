"""The actor table's layout on a real RocksDB: dedup sweep, dead letters, attempt log.

`ChangelogTable` is replaced by one partition's RocksDB without a changelog.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import SupportsBytes

import orjson
import pytest
from rocksdict import Rdict

from dispatcher.actor_store import HISTORY, ActorStore
from dispatcher.domain import keys
from dispatcher.domain.actor import ReceiverState
from dispatcher.domain.ordering_keys import key_hash
from dispatcher.domain.records import Message, ReceiverConfig, encode_backlog_entry


class OnePartitionTable:
    def __init__(self, path: Path) -> None:
        self.rdict = Rdict(str(path))

    def get(self, partition: int, key: bytes) -> bytes | None:
        return self.rdict.get(key)

    def items(
        self, partition: int, prefix: bytes, start: bytes | None = None
    ) -> Iterator[tuple[bytes, bytes]]:
        for key, value in self.rdict.items(from_key=max(start or prefix, prefix)):
            if not key.startswith(prefix):
                return
            yield key, value

    def forget_partitions(self, partitions: set[int]) -> None:
        return None

    def put(self, partition: int, key: bytes, value: bytes | SupportsBytes) -> None:
        self.rdict[key] = bytes(value)

    def delete(self, partition: int, key: bytes) -> None:
        del self.rdict[key]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ActorStore]:
    table = OnePartitionTable(tmp_path / "db")
    yield ActorStore(table, lambda receiver_id: 0)
    table.rdict.close()


def test_dedup_sweep_deletes_expired_ids_in_seq_order(store: ActorStore) -> None:
    for seq in range(1, 11):
        store.remember_id("r1", f"m{seq}", seq, expires_at=100.0 + seq)
    store.remember_id("r2", "other", 1, expires_at=101.0)
    assert store.seen_seq("r1", "m3", now=50.0) == 3
    assert store.sweep_dedup("r1", 0, now=104.5) == 105.0  # m1..m4 gone, m5 next
    assert [store.seen_seq("r1", f"m{i}", now=0.0) for i in (1, 4, 5)] == [None, None, 5]
    assert store.seen_seq("r2", "other", now=0.0) == 1, "another receiver's ids are untouched"
    assert store.sweep_dedup("r1", 0, now=1000.0, limit=3) == 1000.0  # more to do: at once
    assert store.sweep_dedup("r1", 0, now=1000.0) == 0.0
    assert all(store.seen_seq("r1", f"m{i}", now=0.0) is None for i in range(1, 11))


def test_dedup_sweep_keeps_an_id_reused_after_it_expired(store: ActorStore) -> None:
    store.remember_id("r1", "m", 1, expires_at=10.0)
    store.remember_id("r1", "m", 7, expires_at=500.0)  # accepted again once expired: seq 7
    assert store.sweep_dedup("r1", 0, now=20.0) == 500.0
    assert store.seen_seq("r1", "m", now=20.0) == 7


def test_dead_letters_list_in_seq_order_and_trim_oldest(store: ActorStore) -> None:
    for seq in (3, 1, 2, 5):
        store.put_dead_letter("r1", seq, orjson.dumps({"seq": seq}))
    store.put_dead_letter("r10", 1, orjson.dumps({"seq": 99}))  # a prefix-sharing receiver id
    assert [x["seq"] for x in store.dead_letters("r1", 0)] == [1, 2, 3, 5]
    assert [x["seq"] for x in store.dead_letters("r1", 0, after_seq=2, limit=1)] == [3]
    store.trim_dead_letters("r1", 0, excess=2)
    assert [x["seq"] for x in store.dead_letters("r1", 0)] == [3, 5]


class ScanCountingTable(OnePartitionTable):
    """Counts the entries scans read: the work a command does."""

    read = 0

    def items(
        self, partition: int, prefix: bytes, start: bytes | None = None
    ) -> Iterator[tuple[bytes, bytes]]:
        for item in super().items(partition, prefix, start):
            self.read += 1
            yield item


def test_trimming_one_dead_letter_reads_one_entry_however_many_are_kept(tmp_path: Path) -> None:
    table = ScanCountingTable(tmp_path / "db")
    store = ActorStore(table, lambda receiver_id: 0)
    try:
        for seq in range(1, 10_001):
            store.put_dead_letter("r1", seq, b"{}")
        for seq in range(10_001, 10_101):  # a backlog expiring past the cap: one in, one out
            store.put_dead_letter("r1", seq, b"{}")
            store.trim_dead_letters("r1", 0, excess=1)
        assert table.read == 100, "O(1) per expiry, not a scan of the 10,000 kept"
        kept = store.dead_letters("r1", 0, limit=20_000)
        assert len(kept) == 10_000 and kept[0] == {} and table.rdict.get(keys.numbered_key(
            keys.DEAD, "r1", 100)) is None and table.rdict.get(keys.numbered_key(keys.DEAD, "r1", 101))
    finally:
        table.rdict.close()


def test_attempt_log_keeps_the_newest_in_a_ring_of_slots(store: ActorStore) -> None:
    store.attempt_log = 3
    for n in range(1, 3):
        store.log_attempt("r1", n, orjson.dumps({"number": n}))
    assert [a["number"] for a in store.attempts("r1", newest=2, limit=10)] == [2, 1]
    for n in range(3, 8):
        store.log_attempt("r1", n, orjson.dumps({"number": n}))
    assert [a["number"] for a in store.attempts("r1", newest=7, limit=10)] == [7, 6, 5]
    assert [a["number"] for a in store.attempts("r1", newest=7, limit=2)] == [7, 6]
    # three entries whatever the number of attempts: each overwrote the one three older
    assert len(list(store._scan(0, keys.prefix(keys.ATTEMPT, "r1")))) == 3
    # a slot holding an older attempt than the one asked for ends the listing
    assert [a["number"] for a in store.attempts("r1", newest=9, limit=10)] == []


def test_an_attempt_log_of_zero_keeps_nothing(store: ActorStore) -> None:
    store.attempt_log = 0
    store.log_attempt("r1", 1, orjson.dumps({"number": 1}))
    assert store.attempts("r1", newest=1, limit=10) == []
    assert list(store._scan(0, keys.prefix(keys.ATTEMPT, "r1"))) == []


def test_timer_rebuild_reads_each_newest_state_without_filling_the_hot_cache(store: ActorStore) -> None:
    for rid in ("r1", "r2", "r3"):
        store.save(ReceiverState(rid, ReceiverConfig(rid, f"https://example.com/{rid}", "whsec_" + "A" * 32)))
    store.remember_id("r1", "m1", 1, expires_at=100.0)  # other entries of a receiver are not listed
    store.forget_cached()
    assert list(store.receivers_in_partition(0)) == ["r1", "r2", "r3"]
    peeked = store.peek("r2")
    assert peeked is not None and peeked.receiver_id == "r2"
    assert "r2" not in store._states, "a peeked state is not cached"
    newer = ReceiverState("r2", peeked.config, next_seq=7)
    store.save(newer)
    assert store.peek("r2") is newer, "the newest state, as the stream wrote it"
    assert store.peek("nobody") is None


def entry(seq: int) -> bytes:
    return orjson.dumps({"id": f"m{seq}", "seq": seq, "data": {"n": seq}, "accepted_at": 1.0})


def listed(store: ActorStore, after: int = 0, limit: int = 100) -> list[tuple[int, float | None]]:
    return [(e["seq"], at) for e, at in store.messages_after("r1", 0, after, limit)]


def test_a_settled_message_stays_in_place_marked_until_its_retention_ends(store: ActorStore) -> None:
    for seq in (1, 2, 3):
        store.put_backlog("r1", seq, entry(seq))
    store.put_backlog("r10", 1, entry(1))  # a prefix-sharing receiver id
    store.settle("r1", 1, settled_at=100.0)
    store.settle("r1", 2, settled_at=105.0)
    assert listed(store) == [(1, 100.0), (2, 105.0), (3, None)]
    assert [store.pending("r1", seq) for seq in (1, 2, 3, 4)] == [False, False, True, False]
    assert store.get_backlog("r1", 1) == orjson.loads(entry(1)), "kept as stored: no copy, no re-encoding"
    assert store.sweep_retained("r1", 0, now=111.0, retain=10.0) == 115.0  # seq 1 goes, seq 2 next
    assert listed(store) == [(2, 105.0), (3, None)]
    assert store.get_backlog("r1", 1) is None and list(store._scan(0, keys.prefix(keys.RETAINED, "r1"))) == [
        (keys.numbered_key(keys.RETAINED, "r1", 2), b"105.0")]
    assert store.sweep_retained("r1", 0, now=1000.0, retain=10.0) == 0.0
    assert listed(store) == [(3, None)] and store.pending("r1", 3)
    assert store.pending("r10", 1), "another receiver's entries are untouched"


def test_without_retention_a_settled_message_is_deleted(store: ActorStore) -> None:
    store.put_backlog("r1", 1, entry(1))
    store.settle("r1", 1)
    assert store.get_backlog("r1", 1) is None and listed(store) == []
    assert list(store._scan(0, keys.prefix(keys.RETAINED, "r1"))) == []


def test_catch_up_pages_through_kept_and_buffered_messages_in_seq_order(store: ActorStore) -> None:
    for seq in range(1, 8):
        store.put_backlog("r1", seq, entry(seq))
    for seq in range(1, 5):
        store.settle("r1", seq, settled_at=float(seq))
    assert listed(store, limit=3) == [(1, 1.0), (2, 2.0), (3, 3.0)]
    assert listed(store, after=3, limit=3) == [(4, 4.0), (5, None), (6, None)]
    assert listed(store, after=6, limit=3) == [(7, None)]


def test_forgetting_history_takes_the_kept_messages_and_leaves_the_buffered(store: ActorStore) -> None:
    for seq in (1, 2, 3):
        store.put_backlog("r1", seq, entry(seq))
    store.settle("r1", 1, settled_at=100.0)
    store.settle("r1", 2, settled_at=100.0)
    store.put_dead_letter("r1", 2, b'{"seq":2,"reason":"max_attempts"}')
    store.forget("r1", 0, HISTORY)
    assert listed(store) == [(3, None)]
    assert [store.get_backlog("r1", seq) is None for seq in (1, 2, 3)] == [True, True, False]
    assert store.dead_letter("r1", 2) is not None, "without it, seq 2 would read as delivered"


def test_copies_kept_by_the_previous_layout_are_listed_and_swept(store: ActorStore) -> None:
    """Before marks, a settled message was moved to r: wrapped with its settle time."""
    for seq in (1, 2):
        copy = b'{"settled_at":%s,"entry":%s}' % (orjson.dumps(50.0 + seq), entry(seq))
        store._put("r1", keys.numbered_key(keys.RETAINED, "r1", seq), copy)
    store.put_backlog("r1", 3, entry(3))
    store.settle("r1", 3, settled_at=60.0)
    store.put_backlog("r1", 4, entry(4))
    assert listed(store) == [(1, 51.0), (2, 52.0), (3, 60.0), (4, None)]
    assert listed(store, limit=2) == [(1, 51.0), (2, 52.0)]
    assert store.sweep_retained("r1", 0, now=100.0, retain=10.0) == 0.0
    assert listed(store) == [(4, None)]
    assert len(list(store._scan(0, keys.prefix(keys.BACKLOG, "r1")))) == 1


class CountingTable(OnePartitionTable):
    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.gets = 0

    def get(self, partition: int, key: bytes) -> bytes | None:
        self.gets += 1
        return super().get(partition, key)


def test_a_head_read_for_its_age_is_not_read_again_by_its_attempt(tmp_path: Path) -> None:
    table = CountingTable(tmp_path / "db")
    store = ActorStore(table, lambda receiver_id: 0)
    try:
        store.put_backlog("r1", 1, entry(1))
        assert store.accepted_at("r1", 1) == 1.0
        reads = table.gets
        assert [e["seq"] for e in store.backlog_run("r1", 1, 1, 1 << 20)] == [1]
        assert table.gets == reads, "the attempt took the entry the age lookup had read"
        assert [e["seq"] for e in store.backlog_run("r1", 1, 1, 1 << 20)] == [1]
        assert table.gets == reads + 1, "taken once: a second attempt reads it again"
    finally:
        table.rdict.close()


def test_a_kept_head_is_not_served_once_its_key_is_written_again(store: ActorStore) -> None:
    store.put_backlog("r1", 1, entry(1))
    store.accepted_at("r1", 1)
    store.forget_step("r1", 0, 1000)  # deleted and created again: its seqs start again at 1
    assert store.backlog_run("r1", 1, 1, 1 << 20) == []
    store.put_backlog("r1", 1, orjson.dumps({"id": "new", "seq": 1, "accepted_at": 5.0}))
    store.accepted_at("r1", 1)
    store.put_backlog("r1", 1, orjson.dumps({"id": "newer", "seq": 1, "accepted_at": 6.0}))
    assert store.accepted_at("r1", 1) == 6.0
    assert [e["id"] for e in store.backlog_run("r1", 1, 1, 1 << 20)] == ["newer"]


def test_a_deleted_receiver_is_forgotten_in_bounded_steps_its_state_last(tmp_path: Path) -> None:
    table = ScanCountingTable(tmp_path / "db")
    store = ActorStore(table, lambda receiver_id: 0)
    try:
        store.save(ReceiverState("r1", ReceiverConfig("r1", "http://x.test/", "whsec_" + "A" * 32)))
        for seq in range(1, 2_501):
            store.remember_id("r1", f"m{seq}", seq, expires_at=1e12)
            store.put_dead_letter("r1", seq, b"{}")
        store.remember_id("r10", "other", 1, expires_at=1e12)  # a prefix-sharing receiver id
        steps = []
        for _ in range(20):  # bounded; 7,500 entries in steps of 1,000
            table.read = 0
            removed, gone = store.forget_step("r1", 0, 1_000)
            steps.append(removed)
            assert table.read <= 1_000, "one step reads at most its limit"
            if gone:
                break
            assert store.load("r1") is not None, "the state stays until the rest is gone"
        assert steps == [1_000] * 7 + [501] and store.load("r1") is None
        assert store.seen_seq("r10", "other", now=0.0) == 1
    finally:
        table.rdict.close()


def test_filtered_ids_have_seq_0_and_are_swept_by_expiry(store: ActorStore) -> None:
    store.remember_id("r1", "m1", 1, 300.0)
    store.remember_filtered("r1", "f1", 100.0)
    store.remember_filtered("r1", "f2", 100.0)  # the same millisecond: one order key, both ids
    store.remember_filtered("r1", "f3", 200.0)
    assert [store.seen_seq("r1", m, 0.0) for m in ("f1", "f2", "f3", "m1")] == [0, 0, 0, 1]
    assert store.sweep_dedup("r1", 0, now=150.0) == 200.0
    assert store.seen_seq("r1", "f1", 0.0) is None and store.seen_seq("r1", "f2", 0.0) is None
    assert store.seen_seq("r1", "f3", 0.0) == 0
    assert store.sweep_dedup("r1", 0, now=250.0) == 300.0  # the seq's entry is next
    assert store.sweep_dedup("r1", 0, now=400.0) == 0.0
    assert store.seen_seq("r1", "m1", 0.0) is None


def _put_keyed(store: ActorStore, seq: int, key: str) -> None:
    message = Message(f"m{seq}", "r1", "t", {}, accepted_at=1.0, ordering_key=key)
    store.put_backlog("r1", seq, encode_backlog_entry(message, seq))


def test_the_newest_of_each_key_is_indexed_and_forgotten_once_settled(store: ActorStore) -> None:
    for seq, key in ((1, "a"), (2, "b"), (3, "a")):
        _put_keyed(store, seq, key)
        store.put_latest("r1", key, seq)
    assert [store.latest_of_key("r1", seq) for seq in (1, 2, 3)] == [3, 2, 3]
    store.drop_latest("r1", "a", 1)  # not the newest: kept
    assert store.latest_of_key("r1", 1) == 3
    store.drop_latest("r1", "a", 3)
    assert store.latest_of_key("r1", 1) == 0


def test_a_stale_or_colliding_index_entry_supersedes_nothing(store: ActorStore) -> None:
    _put_keyed(store, 1, "a")
    store.put_latest("r1", "a", 2)  # written, then a crash before the state counted seq 2
    _put_keyed(store, 2, "b")  # seq 2 went to another key's message
    assert store.latest_of_key("r1", 1) == 0, "seq 2 is not a message of key a"
    _put_keyed(store, 5, "not-a")
    # another key with the hash of a
    store._put("r1", keys.latest_key("r1", key_hash("a")), orjson.dumps([5, "not-a"]))
    assert store.latest_of_key("r1", 1) == 0


def test_a_superseded_message_reads_so_while_its_id_is_remembered(store: ActorStore) -> None:
    store.remember_id("r1", "m5", 5, expires_at=100.0)
    store.mark_superseded("r1", 5, 9)
    assert (store.superseded_by("r1", 5), store.seen_seq("r1", "m5", now=0.0)) == (9, 5)
    assert store.superseded_by("r1", 6) == 0
    store.sweep_dedup("r1", 0, now=200.0)
    assert store.superseded_by("r1", 5) == 0


def test_a_superseded_message_kept_for_catch_up_reads_so_past_the_dedup_window(store: ActorStore) -> None:
    _put_keyed(store, 1, "a")
    store.remember_id("r1", "m1", 1, expires_at=100.0)
    store.settle("r1", 1, settled_at=50.0, superseded_by=2)
    store.sweep_dedup("r1", 0, now=200.0)  # the id is forgotten; the message is still kept
    assert store.superseded_by("r1", 1) == 2
    assert [(entry["seq"], at) for entry, at in store.messages_after("r1", 0, 0, 10)] == [(1, 50.0)]
    assert store.sweep_retained("r1", 0, now=1000.0, retain=100.0) == 0.0
    assert store.superseded_by("r1", 1) == 0 and store.messages_after("r1", 0, 0, 10) == []
