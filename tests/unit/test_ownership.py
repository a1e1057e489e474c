"""Timer wheels rebuilt from the receivers' states after a rebalance, in the background.

Real RocksDB (one per partition, as Faust keeps them), the real store, runner
and timers; only Faust's app and the deliverer are stand-ins.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any, SupportsBytes

import pytest
from faust.types import TP
from rocksdict import Rdict

from dispatcher.actor_runner import ActorRunner
from dispatcher.actor_store import ActorStore
from dispatcher.domain.actor import Policy, ReceiverState
from dispatcher.domain.breaker import BreakerPolicy
from dispatcher.domain.records import ReceiverConfig
from dispatcher.domain.retry import RetryPolicy
from dispatcher.ownership import CHUNK, Ownership
from dispatcher.timers import PartitionTimers

TOPIC = "app.requests"
POLICY = Policy(RetryPolicy(schedule=(1.0,)), BreakerPolicy(), dedup_window=100.0)
PER_PARTITION = 2 * CHUNK + 7  # more than one chunk each


class Partitions:
    """The TableIO of two partitions, each its own RocksDB."""

    def __init__(self, root: Path) -> None:
        self.dbs = {p: Rdict(str(root / f"p{p}")) for p in (0, 1)}

    def get(self, partition: int, key: bytes) -> bytes | None:
        return self.dbs[partition].get(key)

    def items(
        self, partition: int, prefix: bytes, start: bytes | None = None
    ) -> Iterator[tuple[bytes, bytes]]:
        for key, value in self.dbs[partition].items(from_key=max(start or prefix, prefix)):
            if not key.startswith(prefix):
                return
            yield key, value

    def forget_partitions(self, partitions: set[int]) -> None:
        return None

    def put(self, partition: int, key: bytes, value: bytes | SupportsBytes) -> None:
        self.dbs[partition][key] = bytes(value)

    def delete(self, partition: int, key: bytes) -> None:
        del self.dbs[partition][key]


class IdleDeliverer:
    def busy(self, receiver_id: str) -> bool:
        return False

    def in_flight_seqs(self, receiver_id: str) -> frozenset[int]:
        return frozenset()

    async def drop_partitions(self, partitions: set[int]) -> None:
        return None


def partition_of(receiver_id: str) -> int:
    return int(receiver_id.split("-")[0][1:])


@pytest.fixture
def table(tmp_path: Path) -> Iterator[Partitions]:
    table = Partitions(tmp_path)
    yield table
    for db in table.dbs.values():
        db.close()


def setup(table: Partitions) -> tuple[Ownership, ActorRunner, Any]:
    store = ActorStore(table, partition_of)
    for p in (0, 1):
        for n in range(PER_PARTITION):
            rid = f"p{p}-{n:05d}"
            store.save(ReceiverState(rid, ReceiverConfig(rid, "http://127.0.0.1:9/", "whsec_x"),
                                     dedup_sweep_at=1000.0 + n))
    async def fire(receiver_id: str, partition: int) -> None:
        return None

    runner = ActorRunner(store, IdleDeliverer(), PartitionTimers(fire), _no_dead_letter, POLICY, TOPIC)  # type: ignore[arg-type]
    app = SimpleNamespace(rebalancing=False, assignor=SimpleNamespace(assigned_actives=lambda: set()))
    return Ownership(app, TOPIC, runner), runner, app


async def _no_dead_letter(receiver_id: str, record: bytes) -> None:
    raise AssertionError("nothing is dead-lettered here")


def assign(app: Any, *partitions: int) -> None:
    app.assignor.assigned_actives = lambda: {TP(TOPIC, p) for p in partitions}


async def test_recovery_returns_before_the_rebuild_which_then_sets_every_timer(table: Partitions) -> None:
    ownership, runner, app = setup(table)
    assign(app, 0, 1)
    await ownership.on_recovered()
    assert ownership.recovered and len(runner.timers) <= CHUNK, "the scan goes on after recovery"
    # The stream touches a receiver before the scan reaches it: its newest state wins.
    late_id = f"p1-{PER_PARTITION - 10:05d}"  # in partition 1's last chunk
    late = runner.store.load(late_id)
    assert late is not None
    runner.store.save(replace(late, dedup_sweep_at=5.0))
    assert ownership._rebuild is not None
    await ownership._rebuild
    assert len(runner.timers) == 2 * PER_PARTITION
    assert runner.timers.due_at("p0-00003", 0) == 1003.0
    assert runner.timers.due_at(late_id, 1) == 5.0


async def test_a_rebuild_cut_short_by_a_rebalance_is_finished_by_the_next_recovery(table: Partitions) -> None:
    ownership, runner, app = setup(table)
    assign(app, 0, 1)
    await ownership.on_recovered()
    first = ownership._rebuild
    assert first is not None
    await asyncio.sleep(0)  # one chunk in
    await ownership.on_revoked()
    await first
    assert 0 < len(runner.timers) < 2 * PER_PARTITION, "stopped part-way"
    assign(app, 1)  # partition 0 leaves; partition 1 stays, neither gained nor lost
    await ownership.on_recovered()
    assert ownership._rebuild is not None and ownership._rebuild is not first
    await ownership._rebuild
    assert len(runner.timers) == PER_PARTITION
    assert runner.timers.due_at("p1-00000", 1) == 1000.0 and runner.timers.due_at("p0-00000", 0) is None


async def test_applied_offsets_do_not_outlive_a_move_of_their_partition(table: Partitions) -> None:
    """A status read must not take a partition's old progress for the new owner's (`applied.py`)."""
    ownership, runner, app = setup(table)
    assign(app, 0, 1)
    await ownership.on_recovered()
    for partition in (0, 1):
        runner.applied.positioned(partition, 10)  # the seek after recovery
    waiting = asyncio.ensure_future(runner.applied.reached(1, 12, 30.0))
    await asyncio.sleep(0)
    await ownership.on_revoked()
    assert await waiting is False, "a wait under way when the partition may move answers not caught up"
    runner.applied.mark(0, 11)  # the record being applied when the rebalance began finishes
    assign(app, 1)
    await ownership.on_recovered()
    assert not await runner.applied.reached(0, 1, 0.01), "partition 0 left: nothing it held answers"
    assert not await runner.applied.reached(1, 1, 0.01), "partition 1 stays, but is known from its seek"
    runner.applied.positioned(1, 12)
    assert await runner.applied.reached(1, 12, 0.0)
