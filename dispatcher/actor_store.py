"""Typed access to the actor table: state, backlog, dedup, dead letters, attempt log.

Every entry of a receiver lives in the receiver's partition (the partition of
its id, as the requests topic's): reads and writes go to that partition's
RocksDB, and writes to its changelog, through `ChangelogTable`. Only the
receiver's actor writes (the runner, applying a record of the partition or
an outcome, under its lock); reads work anywhere on the owning worker.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator
from itertools import islice
from typing import Any, Protocol, SupportsBytes

import orjson

from .domain import keys
from .domain.actor import ReceiverState
from .domain.ordering_keys import key_hash

ALL_ENTRIES = (
    keys.BACKLOG, keys.DEDUP, keys.DEDUP_ORDER, keys.FILTERED_ORDER, keys.DEAD, keys.ATTEMPT, keys.RETAINED,
    keys.LATEST,
)
# What a reset drops. Dead letters stay: a settled message without one reads as delivered.
HISTORY = (keys.ATTEMPT, keys.RETAINED)


class TableIO(Protocol):
    """Per-partition reads and writes of the table (`ChangelogTable`)."""

    def get(self, partition: int, key: bytes) -> bytes | None: ...

    def put(self, partition: int, key: bytes, value: bytes | SupportsBytes) -> None: ...  # bytes(value)

    def delete(self, partition: int, key: bytes) -> None: ...

    def items(
        self, partition: int, prefix: bytes, start: bytes | None = None
    ) -> Iterator[tuple[bytes, bytes]]: ...  # key order, from `start` (or `prefix`) while under `prefix`

    def forget_partitions(self, partitions: set[int]) -> None: ...

    @property
    def last_number(self) -> int: ...  # the number of the newest write so far

    def durable(self, partition: int, number: int) -> bool | None: ...  # see ChangelogTable.durable


STATES_CACHED = 2048  # decoded states of the receivers used last (a delivery reads its state twice)
# Entries read to learn a new head's age, kept (with their stored size) for the attempt that
# posts that head a moment later, instead of a second read and decode of the same message.
HEADS_KEPT = 64


class ActorStore:
    def __init__(self, table: TableIO, partition_of: Callable[[str], int], attempt_log: int = 50) -> None:
        self._io = table
        self.partition_of = partition_of
        self.attempt_log = max(attempt_log, 0)  # attempts kept per receiver, the ring's slots (0: none)
        # States are immutable; the runner is their only writer, so a cached one is current
        # until a partition changes hands (Faust's recovery writes RocksDB): `forget_cached`.
        self._states: OrderedDict[str, ReceiverState] = OrderedDict()
        self._heads: OrderedDict[bytes, tuple[int, dict[str, Any]]] = OrderedDict()  # key -> size, entry

    def forget_cached(self) -> None:
        self._states.clear()
        self._heads.clear()

    def hand_over(self, partitions: set[int]) -> None:
        """Partitions this worker lost: nothing of theirs is kept here."""
        self._heads.clear()
        self._io.forget_partitions(partitions)

    def _cache(self, state: ReceiverState) -> None:
        states = self._states
        states[state.receiver_id] = state
        states.move_to_end(state.receiver_id)
        if len(states) > STATES_CACHED:
            states.popitem(last=False)

    def _get(self, receiver_id: str, key: bytes) -> bytes | None:
        return self._io.get(self.partition_of(receiver_id), key)

    def _put(self, receiver_id: str, key: bytes, value: bytes | SupportsBytes) -> None:
        self._heads.pop(key, None)
        self._io.put(self.partition_of(receiver_id), key, value)

    def _delete(self, receiver_id: str, key: bytes) -> None:
        self._heads.pop(key, None)
        self._io.delete(self.partition_of(receiver_id), key)

    # state and backlog ---------------------------------------------------------

    def load(self, receiver_id: str) -> ReceiverState | None:
        state = self._states.get(receiver_id)
        if state is None:
            state = self._stored_state(receiver_id)
            if state is not None:
                self._cache(state)
        return state

    def _stored_state(self, receiver_id: str) -> ReceiverState | None:
        raw = self._get(receiver_id, keys.state_key(receiver_id))
        return None if raw is None else ReceiverState.from_bytes(raw)

    def last_write(self) -> int:
        """The number of the newest table write so far (of any receiver)."""
        return self._io.last_number

    def durable_through(self, receiver_id: str, number: int) -> bool | None:
        """Are the receiver partition's writes up to `number` in the changelog (a successor after a
        crash recovers them)? None: one was dropped unsent (a rebalance under a stall)."""
        return self._io.durable(self.partition_of(receiver_id), number)

    def save(self, state: ReceiverState) -> None:
        self._put(state.receiver_id, keys.state_key(state.receiver_id), state)  # encoded when sent
        self._cache(state)

    def put_backlog(self, receiver_id: str, seq: int, encoded: bytes) -> None:
        self._put(receiver_id, keys.backlog_key(receiver_id, seq), encoded)

    def get_backlog(self, receiver_id: str, seq: int) -> dict[str, Any] | None:
        raw = self._get(receiver_id, keys.backlog_key(receiver_id, seq))
        return None if raw is None else orjson.loads(raw)

    def entry_size(self, receiver_id: str, seq: int) -> int:
        raw = self._get(receiver_id, keys.backlog_key(receiver_id, seq))
        return 0 if raw is None else len(raw)

    def backlog_view(self, receiver_id: str) -> ReceiverBacklog:
        """The receiver's backlog as the actor reads it (`BacklogView`)."""
        return ReceiverBacklog(self, receiver_id)

    def backlog_run(self, receiver_id: str, seq: int, count: int, max_bytes: int) -> list[dict[str, Any]]:
        """Entries seq, seq+1, ... : at most `count`, and at most `max_bytes` unless the first alone."""
        entries: list[dict[str, Any]] = []
        total = 0
        for number in range(seq, seq + count):
            key = keys.backlog_key(receiver_id, number)
            size, entry = self._heads.pop(key, None) or self._read_entry(receiver_id, key)
            if entry is None or (entries and total + size > max_bytes):
                break
            total += size
            entries.append(entry)
        return entries

    def accepted_at(self, receiver_id: str, seq: int) -> float | None:
        key = keys.backlog_key(receiver_id, seq)
        head = self._heads.get(key)
        if head is None:
            head = self._read_entry(receiver_id, key)
            if head[1] is None:
                return None
            self._heads[key] = head
            if len(self._heads) > HEADS_KEPT:
                self._heads.popitem(last=False)
        return float(head[1]["accepted_at"])

    def ordering_key(self, receiver_id: str, seq: int) -> str:
        """The stored message's ordering key ("" for none); read after `accepted_at`, whose read it
        shares (the entry stays among the heads kept)."""
        key = keys.backlog_key(receiver_id, seq)
        head = self._heads.get(key) or self._read_entry(receiver_id, key)
        return "" if head[1] is None else str(head[1].get("ordering_key") or "")

    # coalescing: the newest seq of each ordering key ------------------------------------

    def put_latest(self, receiver_id: str, key: str, seq: int) -> None:
        """`seq` is the newest message of ordering `key` (under its hash; the key itself is kept
        to tell two keys of one hash apart)."""
        self._put(receiver_id, keys.latest_key(receiver_id, key_hash(key)), orjson.dumps([seq, key]))

    def latest_of_key(self, receiver_id: str, seq: int) -> int:
        """The newest seq stored under the ordering key of message `seq`; 0 when not known."""
        key = self.ordering_key(receiver_id, seq)
        raw = self._get(receiver_id, keys.latest_key(receiver_id, key_hash(key))) if key else None
        if raw is None:
            return 0
        newest, of = orjson.loads(raw)
        if of != key:  # another key of the same hash: not known
            return 0
        # Written before the state that counts it: after a crash between the two, the seq may be
        # another message's (or none yet). Only a stored message of this key supersedes.
        return int(newest) if self.ordering_key(receiver_id, int(newest)) == key else 0

    def mark_superseded(self, receiver_id: str, seq: int, by: int) -> None:
        """Message `seq` was settled unsent for `by`: its dedup entry (status) says so while kept."""
        msg_id = self._get(receiver_id, keys.numbered_key(keys.DEDUP_ORDER, receiver_id, seq))
        if msg_id is None:
            return
        dedup = keys.dedup_key(receiver_id, msg_id.decode())
        raw = self._get(receiver_id, dedup)
        entry = orjson.loads(raw) if raw is not None else None
        if entry is not None and entry["seq"] == seq:
            self._put(receiver_id, dedup, orjson.dumps({**entry, "by": by}))

    def superseded_by(self, receiver_id: str, seq: int) -> int:
        """The seq that superseded message `seq` (coalescing), or 0: from its retained mark while it is
        kept for catch-up, else from its dedup entry while that is kept."""
        mark = self._get(receiver_id, keys.numbered_key(keys.RETAINED, receiver_id, seq))
        if mark is not None and mark.startswith(b"["):
            return int(orjson.loads(mark)[1])
        msg_id = self._get(receiver_id, keys.numbered_key(keys.DEDUP_ORDER, receiver_id, seq))
        raw = self._get(receiver_id, keys.dedup_key(receiver_id, msg_id.decode())) if msg_id else None
        entry = orjson.loads(raw) if raw is not None else None
        return int(entry.get("by", 0)) if entry is not None and entry["seq"] == seq else 0

    def drop_latest(self, receiver_id: str, key: str, seq: int) -> None:
        """Message `seq` of `key` is settled: if it was the newest, the key leaves the index."""
        index = keys.latest_key(receiver_id, key_hash(key))
        raw = self._get(receiver_id, index)
        if raw is not None and orjson.loads(raw) == [seq, key]:
            self._delete(receiver_id, index)

    def _read_entry(self, receiver_id: str, key: bytes) -> tuple[int, Any]:
        raw = self._get(receiver_id, key)
        return (0, None) if raw is None else (len(raw), orjson.loads(raw))

    def settle(self, receiver_id: str, seq: int, settled_at: float = 0.0, superseded_by: int = 0) -> None:
        """A message got its 2xx, was dead-lettered or superseded: it leaves the backlog.

        With `settled_at` its entry stays where it is, readable for catch-up,
        and a small mark (`r:`, the settle time) says it is settled: one short
        record instead of a copy of the message and a delete. A superseded
        message's mark is `[settle time, the seq that superseded it]`.
        """
        if settled_at:
            mark = keys.numbered_key(keys.RETAINED, receiver_id, seq)
            value = [settled_at, superseded_by] if superseded_by else settled_at
            self._put(receiver_id, mark, orjson.dumps(value))
        else:
            self._delete(receiver_id, keys.backlog_key(receiver_id, seq))

    def pending(self, receiver_id: str, seq: int) -> bool:
        """Is message `seq` in the backlog (stored and not settled)?"""
        return (self._get(receiver_id, keys.backlog_key(receiver_id, seq)) is not None
                and self._get(receiver_id, keys.numbered_key(keys.RETAINED, receiver_id, seq)) is None)

    def sweep_retained(self, receiver_id: str, partition: int, now: float, retain: float,
                       limit: int = 1000) -> float:
        """Delete kept messages older than `retain`, lowest seq first; return the next expiry (0: none)."""
        entries = list(self._scan(partition, keys.prefix(keys.RETAINED, receiver_id), limit + 1))
        for swept, (key, raw) in enumerate(entries):
            settled_at, _ = _retained(raw)
            if settled_at + retain > now:
                return settled_at + retain
            if swept == limit:
                return now  # more to do: come back at once
            if not raw.startswith(b"{"):  # a mark: its message is in the backlog's keys
                self._delete(receiver_id, keys.backlog_key(receiver_id, keys.number_of(key)))
            self._delete(receiver_id, key)
        return 0.0

    def messages_after(
        self, receiver_id: str, partition: int, after_seq: int, limit: int
    ) -> list[tuple[dict[str, Any], float | None]]:
        """Kept (settled, with when) and buffered (None) messages above `after_seq`, in seq order."""
        found: list[tuple[int, dict[str, Any], float | None]] = []
        start = keys.numbered_key(keys.BACKLOG, receiver_id, after_seq + 1)
        for key, raw in self._scan(partition, keys.prefix(keys.BACKLOG, receiver_id), limit, start):
            seq = keys.number_of(key)
            mark = self._get(receiver_id, keys.numbered_key(keys.RETAINED, receiver_id, seq))
            found.append((seq, orjson.loads(raw), None if mark is None else _retained(mark)[0]))
        # Copies kept by a version that moved a settled message out of the backlog (its marks are
        # read above). Past a full page of the backlog's, or `limit` copies, none can make the page.
        full, last = len(found) == limit, found[-1][0] if found else after_seq
        copies = 0
        start = keys.numbered_key(keys.RETAINED, receiver_id, after_seq + 1)
        for key, raw in self._scan(partition, keys.prefix(keys.RETAINED, receiver_id), start=start):
            seq = keys.number_of(key)
            if (full and seq > last) or copies == limit:
                break
            if raw.startswith(b"{"):
                settled_at, entry = _retained(raw)
                found.append((seq, entry or {}, settled_at))
                copies += 1
        found.sort(key=lambda item: item[0])
        return [(entry, at) for _, entry, at in found[:limit]]

    def states_after(self, partition: int, after: str) -> Iterator[ReceiverState]:
        """The partition's receivers in id order, from the first id above `after` ("" for all)."""
        start = keys.state_key(after) + b"\x00" if after else None
        for _, value in self._scan(partition, keys.STATE, start=start):
            yield ReceiverState.from_bytes(value)

    def receivers_in_partition(self, partition: int) -> Iterator[str]:
        """The id of every receiver with a state in one local partition (for rebuilding timers)."""
        skip = len(keys.STATE)
        for key, _ in self._scan(partition, keys.STATE):
            yield key[skip:].decode()

    def peek(self, receiver_id: str) -> ReceiverState | None:
        """The newest state, like `load`, but one not cached stays out of the cache of hot states."""
        return self._states.get(receiver_id) or self._stored_state(receiver_id)

    def forget_step(self, receiver_id: str, partition: int, limit: int) -> tuple[int, bool]:
        """Delete up to `limit` of a deleted receiver's entries, its state last: (deleted, all gone).

        Bounded, so a receiver with a million dedup ids is forgotten over many
        commands instead of stalling its partition in one.
        """
        doomed: list[bytes] = []
        for kind in ALL_ENTRIES:
            room = limit - len(doomed)
            doomed += [key for key, _ in self._scan(partition, keys.prefix(kind, receiver_id), room)]
            if len(doomed) >= limit:
                break
        for key in doomed:  # collected first: no deletes while RocksDB iterates
            self._io.delete(partition, key)
        if len(doomed) >= limit:
            return len(doomed), False
        self._heads.clear()
        self._states.pop(receiver_id, None)
        self._io.delete(partition, keys.state_key(receiver_id))
        return len(doomed) + 1, True

    def forget(self, receiver_id: str, partition: int, kinds: tuple[bytes, ...]) -> int:
        """Delete the receiver's entries of `kinds` (its history, on a reset); return the count.
        A deleted receiver goes through `forget_step`, its state last."""
        self._heads.clear()
        doomed: list[bytes] = []
        for kind in kinds:
            doomed += [key for key, _ in self._scan(partition, keys.prefix(kind, receiver_id))]
        if keys.RETAINED in kinds and keys.BACKLOG not in kinds:  # a kept message goes with its mark
            marks = self._scan(partition, keys.prefix(keys.RETAINED, receiver_id))
            doomed += [keys.backlog_key(receiver_id, keys.number_of(key))
                       for key, raw in marks if not raw.startswith(b"{")]
        for key in doomed:  # collected first: no deletes while RocksDB iterates
            if self._io.get(partition, key) is not None:
                self._io.delete(partition, key)
        return len(doomed)

    # dedup -------------------------------------------------------------------------

    def seen_seq(self, receiver_id: str, msg_id: str, now: float) -> int | None:
        """The seq a message id got within the dedup window, if any."""
        raw = self._get(receiver_id, keys.dedup_key(receiver_id, msg_id))
        if raw is None:
            return None
        entry = orjson.loads(raw)
        return entry["seq"] if entry["exp"] > now else None

    def remember_id(self, receiver_id: str, msg_id: str, seq: int, expires_at: float) -> None:
        entry = orjson.dumps({"seq": seq, "exp": expires_at})
        self._put(receiver_id, keys.dedup_key(receiver_id, msg_id), entry)
        self._put(receiver_id, keys.numbered_key(keys.DEDUP_ORDER, receiver_id, seq), msg_id.encode())

    def remember_filtered(self, receiver_id: str, msg_id: str, expires_at: float) -> None:
        """A message id the receiver's filter refused: seq 0 in its dedup entry, swept by expiry."""
        entry = orjson.dumps({"seq": 0, "exp": expires_at})
        self._put(receiver_id, keys.dedup_key(receiver_id, msg_id), entry)
        order = keys.numbered_key(keys.FILTERED_ORDER, receiver_id, int(expires_at * 1000))
        earlier = self._get(receiver_id, order)  # ids refused in the same millisecond share the key
        self._put(receiver_id, order, earlier + b"\n" + msg_id.encode() if earlier else msg_id.encode())

    def mark_cancelled(self, receiver_id: str, msg_id: str, seq: int) -> None:
        """Message `seq` was cancelled by the receiver's transform: its dedup entry says so while it lasts."""
        key = keys.dedup_key(receiver_id, msg_id)
        raw = self._get(receiver_id, key)
        entry = orjson.loads(raw) if raw is not None else None
        if entry is not None and entry["seq"] == seq:
            self._put(receiver_id, key, orjson.dumps({**entry, "cancelled": True}))

    def cancelled(self, receiver_id: str, msg_id: str) -> bool:
        """Was the message cancelled by the receiver's transform (within the dedup window)?"""
        raw = self._get(receiver_id, keys.dedup_key(receiver_id, msg_id))
        return raw is not None and orjson.loads(raw).get("cancelled") is True

    def sweep_dedup(self, receiver_id: str, partition: int, now: float, limit: int = 1000) -> float:
        """Delete expired dedup entries (seqs', then filtered ids'); return the next expiry (0: none)."""
        after_seqs = self._sweep_seq_ids(receiver_id, partition, now, limit)
        after_filtered = self._sweep_filtered_ids(receiver_id, partition, now, limit)
        return min((t for t in (after_seqs, after_filtered) if t), default=0.0)

    def _sweep_seq_ids(self, receiver_id: str, partition: int, now: float, limit: int) -> float:
        """Entries expire in seq order (each expires a fixed window after intake),
        so the sweep stops at the first live one."""
        entries = list(self._scan(partition, keys.prefix(keys.DEDUP_ORDER, receiver_id), limit + 1))
        for swept, (key, msg_id) in enumerate(entries):
            dedup_key = keys.dedup_key(receiver_id, msg_id.decode())
            raw = self._get(receiver_id, dedup_key)
            entry = orjson.loads(raw) if raw is not None else None
            if entry is not None and entry["seq"] == keys.number_of(key) and entry["exp"] > now:
                return float(entry["exp"])
            if swept == limit:
                return now  # more to do: come back at once
            if entry is not None and entry["seq"] == keys.number_of(key):
                self._delete(receiver_id, dedup_key)
            self._delete(receiver_id, key)
        return 0.0

    def _sweep_filtered_ids(self, receiver_id: str, partition: int, now: float, limit: int) -> float:
        """Filtered ids, keyed by their expiry: the sweep stops at the first key not yet due."""
        entries = list(self._scan(partition, keys.prefix(keys.FILTERED_ORDER, receiver_id), limit + 1))
        for swept, (key, ids) in enumerate(entries):
            expires = keys.number_of(key) / 1000
            if expires > now:
                return expires
            if swept == limit:
                return now
            for msg_id in ids.split(b"\n"):
                dedup_key = keys.dedup_key(receiver_id, msg_id.decode())
                raw = self._get(receiver_id, dedup_key)
                if raw is not None and orjson.loads(raw)["seq"] == 0:  # not since taken by a seq
                    self._delete(receiver_id, dedup_key)
            self._delete(receiver_id, key)
        return 0.0

    # dead letters ------------------------------------------------------------------

    def put_dead_letter(self, receiver_id: str, seq: int, record: bytes) -> None:
        self._put(receiver_id, keys.numbered_key(keys.DEAD, receiver_id, seq), record)

    def trim_dead_letters(self, receiver_id: str, partition: int, excess: int) -> None:
        """Delete the oldest `excess` dead letters: reads `excess` entries, however many are kept."""
        oldest = [key for key, _ in self._scan(partition, keys.prefix(keys.DEAD, receiver_id), excess)]
        for key in oldest:  # collected first: no deletes while RocksDB iterates
            self._delete(receiver_id, key)

    def dead_letter(self, receiver_id: str, seq: int) -> dict[str, Any] | None:
        raw = self._get(receiver_id, keys.numbered_key(keys.DEAD, receiver_id, seq))
        return None if raw is None else orjson.loads(raw)

    def dead_letters(
        self, receiver_id: str, partition: int, after_seq: int = 0, limit: int = 100
    ) -> list[dict[str, Any]]:
        start = keys.numbered_key(keys.DEAD, receiver_id, after_seq + 1)
        found = self._scan(partition, keys.prefix(keys.DEAD, receiver_id), limit, start)
        return [orjson.loads(value) for _, value in found]

    # attempt log --------------------------------------------------------------------

    def log_attempt(self, receiver_id: str, number: int, record: bytes) -> None:
        """Attempt `number` overwrites the one `attempt_log` attempts older: one write, no delete."""
        if not self.attempt_log:
            return
        self._put(receiver_id, self._attempt_key(receiver_id, number), record)

    def attempts(self, receiver_id: str, newest: int, limit: int) -> list[dict[str, Any]]:
        """Up to `limit` attempts, newest first, counting down from attempt `newest`."""
        out = []
        for number in range(newest, max(0, newest - min(limit, self.attempt_log)), -1):
            raw = self._get(receiver_id, self._attempt_key(receiver_id, number))
            if raw is None:
                break
            entry = orjson.loads(raw)
            if entry.get("number") != number:  # the slot holds an older attempt: the log is shorter
                break
            out.append(entry)
        return out

    def _attempt_key(self, receiver_id: str, number: int) -> bytes:
        """The log is a ring of `attempt_log` slots, 1 to `attempt_log` (attempt numbers start at 1)."""
        return keys.numbered_key(keys.ATTEMPT, receiver_id, (number - 1) % self.attempt_log + 1)

    # scans -------------------------------------------------------------------------

    def _scan(
        self, partition: int, prefix: bytes, limit: int | None = None, start: bytes | None = None
    ) -> Iterator[tuple[bytes, bytes]]:
        # islice stops at `limit` without reading one entry more
        yield from islice(self._io.items(partition, prefix, start), limit)


def _retained(raw: bytes) -> tuple[float, dict[str, Any] | None]:
    """A retained mark's settle time; an older version's copy (an object) also carries its message;
    a superseded message's mark is a list (its settle time first)."""
    value = orjson.loads(raw)
    if isinstance(value, dict):
        return float(value["settled_at"]), value["entry"]
    if isinstance(value, list):
        return float(value[0]), None
    return float(value), None


class ReceiverBacklog:
    """One receiver's stored backlog entries, read-only: the actor's `BacklogView` over the table."""

    __slots__ = ("_receiver_id", "_store")

    def __init__(self, store: ActorStore, receiver_id: str) -> None:
        self._store = store
        self._receiver_id = receiver_id

    def accepted_at(self, seq: int) -> float | None:
        return self._store.accepted_at(self._receiver_id, seq)

    def size(self, seq: int) -> int:
        return self._store.entry_size(self._receiver_id, seq)

    def key(self, seq: int) -> str:
        return self._store.ordering_key(self._receiver_id, seq)

    def latest(self, seq: int) -> int:
        return self._store.latest_of_key(self._receiver_id, seq)
