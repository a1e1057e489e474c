"""A bug of ours while an attempt runs is a failed attempt, never a receiver left busy for ever."""

from __future__ import annotations

import asyncio
from typing import Any

from dispatcher.deliverer import Deliverer, lane_limits
from dispatcher.domain.records import Outcome, ReceiverConfig
from dispatcher.domain.slots import SlotPool
from dispatcher.transport import Gate, Response

CONFIG = ReceiverConfig("r1", "http://127.0.0.1:1/hook", "whsec_" + "A" * 32)


class Answers200:
    async def post(
        self, url: str, headers: dict[str, str], body: bytes, gate: Gate | None = None
    ) -> Response:
        return Response(200)

    async def request(self, method: str, url: str, headers: dict[str, str], body: bytes = b"",
                      gate: Gate | None = None) -> Response:
        return Response(200)

    async def close(self) -> None:
        return None


async def test_an_attempt_whose_entry_cannot_be_read_reports_a_failure_and_frees_its_slot() -> None:
    reported: list[Outcome] = []
    lost: list[str] = []

    async def send_outcome(receiver_id: str, partition: int, outcome: Outcome) -> None:
        reported.append(outcome)

    def broken_store(receiver_id: str, seq: int, count: int, max_bytes: int) -> list[dict[str, Any]]:
        raise RuntimeError("a bug while reading the backlog")

    pool: SlotPool[Any] = SlotPool(lane_limits(4, 1), 4, {})
    deliverer = Deliverer(Answers200(), send_outcome, pool, broken_store, lambda rid, p: lost.append(rid))
    deliverer.start("r1", 0, CONFIG, seq=7, attempt=3)
    for _ in range(100):  # bounded: the attempt runs on the next turns of the loop
        if reported:
            break
        await asyncio.sleep(0.01)
    [outcome] = reported
    assert (outcome.seq, outcome.attempt, outcome.ok, outcome.status) == (7, 3, False, None)
    assert outcome.error == "internal error: RuntimeError"
    assert pool.used == {"fast": 0, "slow": 0}, "the slot went back"
    deliverer.release("r1", outcome.token)  # as the actor does when it applies the outcome
    assert not deliverer.busy("r1")


async def test_an_attempt_dropped_before_its_first_step_frees_its_slot() -> None:
    """A partition that moves right after an attempt got its slot (started, or handed a freed one)
    cancels a task that never ran, so never reached its `finally`: the slot was lost for good, and
    with it, in time, the lane, the host or the tenant's share."""
    async def send_outcome(receiver_id: str, partition: int, outcome: Outcome) -> None:
        return None

    def entries(receiver_id: str, seq: int, count: int, max_bytes: int) -> list[dict[str, Any]]:
        return [{"id": f"m{seq}", "seq": seq, "type": "a.b", "data": {}, "headers": {}, "accepted_at": 1.0}]

    pool: SlotPool[Any] = SlotPool(lane_limits(1, 1), 4, {})
    deliverer = Deliverer(Answers200(), send_outcome, pool, entries, lambda rid, p: None)
    deliverer.start("r1", 0, CONFIG, seq=1, attempt=1)  # the lane's one slot; its task not run yet
    deliverer.start("r2", 1, CONFIG, seq=1, attempt=1)  # waits for it
    assert (pool.used["fast"], pool.waiting) == (1, 1)
    await deliverer.drop_partitions({0})  # r1's slot goes to r2, whose task has not run either ...
    assert (pool.used["fast"], pool.waiting) == (1, 0)
    await deliverer.drop_partitions({1})  # ... when its partition moves too
    assert pool.used == {"fast": 0, "slow": 0} and pool.host_used == {}
    deliverer.start("r3", 2, CONFIG, seq=1, attempt=1)
    assert pool.used["fast"] == 1 and pool.waiting == 0, "a later attempt gets the slot"
    await deliverer.close()
