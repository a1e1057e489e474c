"""What the engine's own Python costs per delivery, without Kafka, RocksDB or a socket.

The worker's parts as the worker wires them (record decoding, `ActorRunner`,
`ActorStore`, the actor's `decide`, `Deliverer` with its slot pool, body
building and signing), fed the drain scenario's records through
`apply_record`, as the consumer feeds them. The table is a dict (no changelog, no RocksDB) and the
transport answers 200 at once (no socket), so what is measured is the CPU of
the Python between those edges: the share of a delivery that profiling and
code changes can cut without touching Kafka or HTTP. The suite's drain then
tells what the rest adds. Figures are printed, never asserted; the JSON is
saved under bench/results/.

    python -m bench.engine            # 20,000 messages to 1,000 receivers, 5 rounds
    python -m bench.engine --quick    # a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, SupportsBytes

from dispatcher.actor_parts import Outlets, build_actor_parts
from dispatcher.consume import apply_record
from dispatcher.domain.ids import new_id
from dispatcher.domain.records import (
    Message,
    Outcome,
    ReceiverConfig,
    encode_message_record,
    encode_upsert_record,
)
from dispatcher.domain.signing import generate_secret
from dispatcher.settings import Settings
from dispatcher.timers import PartitionTimers
from dispatcher.transport import Gate, NotSent, Response

from .runs import RESULTS, run_on, save, worker_loop
from .suite import body_of, cpu_model, progress

REQUESTS, COMMANDS = "engine.requests", "engine.commands"
# What nginx answers in the suite, as the transports hand it on (the kept headers, names lowercased):
# the attempt log stores these with each attempt.
ANSWER = Response(200, {"server": "nginx", "date": "Mon, 23 Nov 2026 18:00:00 GMT",
                        "content-type": "text/plain", "content-length": "0"})


class DictTable:
    """The store's TableIO over one dict (every partition in it: keys carry the receiver id).

    It counts what the store writes: each put or delete is a changelog record
    (before the writer drops those a later write to the same key replaces).
    """

    def __init__(self) -> None:
        self.entries: dict[bytes, bytes] = {}
        self.puts = 0
        self.deletes = 0
        self.bytes = 0  # keys and values of every put and delete

    def get(self, partition: int, key: bytes) -> bytes | None:
        return self.entries.get(key)

    def put(self, partition: int, key: bytes, value: bytes | SupportsBytes) -> None:
        raw = bytes(value)  # at every put (the worker's writer skips a state replaced within a linger)
        self.entries[key] = raw
        self.puts += 1
        self.bytes += len(key) + len(raw)

    def delete(self, partition: int, key: bytes) -> None:
        self.entries.pop(key, None)
        self.deletes += 1
        self.bytes += len(key)

    def items(
        self, partition: int, prefix: bytes, start: bytes | None = None
    ) -> Iterator[tuple[bytes, bytes]]:
        low = max(start or prefix, prefix)
        for key in sorted(k for k in self.entries if k.startswith(prefix) and k >= low):
            yield key, self.entries[key]

    def forget_partitions(self, partitions: set[int]) -> None:
        return None


class AnswerAtOnce:
    """A transport whose receiver answers 200 without a socket; counts POSTs and order breaks."""

    def __init__(self) -> None:
        self.posts = 0
        self.out_of_order = 0
        self.last_seq: dict[str, int] = {}  # url -> the last webhook-sequence it got

    async def post(
        self, url: str, headers: dict[str, str], body: bytes, gate: Gate | None = None
    ) -> Response:
        if gate is not None and not gate():  # what a real transport asks as it writes
            raise NotSent("held back")
        self.posts += 1
        seq = int(headers["webhook-sequence"])
        if seq != self.last_seq.get(url, 0) + 1:
            self.out_of_order += 1
        self.last_seq[url] = seq
        return ANSWER

    async def request(self, method: str, url: str, headers: dict[str, str], body: bytes = b"",
                      gate: Gate | None = None) -> Response:
        return ANSWER

    async def close(self) -> None:
        return None


@dataclass(slots=True)
class Record:
    """The fields of a consumed record that `apply` reads."""

    topic: str
    partition: int
    offset: int
    key: bytes
    value: bytes
    timestamp: float


class Engine:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.transport = AnswerAtOnce()
        self.outcomes = 0
        self.expected = 0
        self.all_applied = asyncio.Event()  # every expected outcome applied
        self.table = DictTable()
        outlets = Outlets(self._send_outcome, self._lost, self._dead_letter)
        parts = build_actor_parts(settings, self.table, self.partition_of, self.transport,
                                  PartitionTimers(self._fire), outlets, REQUESTS)  # as the worker wires them
        self.deliverer, self.runner = parts.deliverer, parts.runner
        self.runner.writable = lambda partition: True
        self._offsets: dict[int, int] = {}

    def partition_of(self, receiver_id: str) -> int:
        return hash(receiver_id) % self.settings.partitions

    def record(self, receiver_id: str, value: bytes, topic: str = REQUESTS) -> Record:
        partition = self.partition_of(receiver_id)
        offset = self._offsets[partition] = self._offsets.get(partition, -1) + 1
        return Record(topic, partition, offset, receiver_id.encode(), value, time.time())

    async def apply(self, record: Record) -> None:
        await apply_record(record, COMMANDS, self.runner)

    async def _send_outcome(self, receiver_id: str, partition: int, outcome: Outcome) -> None:
        if not await self.runner.apply_outcome(receiver_id, partition, outcome):
            raise AssertionError("every partition is writable here")
        self.outcomes += 1
        if self.outcomes >= self.expected:
            self.all_applied.set()

    async def _fire(self, receiver_id: str, partition: int) -> None:
        return None

    def _lost(self, receiver_id: str, partition: int) -> None:
        raise AssertionError(f"an outcome was lost: {receiver_id}")

    async def _dead_letter(self, receiver_id: str, record: bytes) -> None:
        raise AssertionError(f"nothing is dead-lettered here: {record!r}")


async def one_round(receivers: int, per_receiver: int) -> dict[str, float]:
    """Register, take in every message (the receivers busy with their first), then deliver all."""
    engine = Engine(Settings())
    ids = [f"engine-{n:06d}" for n in range(receivers)]
    for rid in ids:
        config = ReceiverConfig(rid, f"http://127.0.0.1:9/{rid}", generate_secret(), created_at=0.0)
        await engine.apply(engine.record(rid, encode_upsert_record(config), COMMANDS))
    payload = body_of(1024)
    records = [engine.record(rid, encode_message_record(Message(new_id("msg"), rid, "bench.engine", payload,
                                                                    {}, time.time())))
               for _ in range(per_receiver) for rid in ids]
    total = len(records)
    engine.expected = total
    table = engine.table
    writes_before = (table.puts, table.deletes, table.bytes)
    started = time.process_time()
    for record in records:  # the fetcher applies a batch's records back to back
        await engine.apply(record)
    taken_in = time.process_time()
    await asyncio.wait_for(engine.all_applied.wait(), 60 + total / 100)
    finished = time.process_time()
    if engine.deliverer.in_flight:
        raise AssertionError(f"{engine.deliverer.in_flight} attempts still in flight")
    puts, deletes, written = (now - before for now, before in
                              zip((table.puts, table.deletes, table.bytes), writes_before, strict=True))
    return {
        "messages": total,
        "delivered": engine.transport.posts,
        "out_of_order": engine.transport.out_of_order,
        "table_puts": puts / total,
        "table_deletes": deletes / total,
        "table_bytes": written / total,
        "us_per_delivery": (finished - started) / total * 1e6,
        "intake_us": (taken_in - started) / total * 1e6,
        "delivery_us": (finished - taken_in) / total * 1e6,
    }


async def run(args: argparse.Namespace) -> list[dict[str, float]]:
    rounds = []
    for n in range(args.rounds):
        rounds.append(await one_round(args.receivers, args.per_receiver))
        r = rounds[-1]
        progress(f"round {n + 1}: {r['us_per_delivery']:.1f} us per delivery "
                 f"(intake {r['intake_us']:.1f}, delivery and outcome {r['delivery_us']:.1f})")
    return rounds


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for the smoke test")
    parser.add_argument("--receivers", type=int, default=1_000)
    parser.add_argument("--per-receiver", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.quick:
        args.receivers, args.per_receiver, args.rounds = 20, 3, 1
    loop = worker_loop()
    rounds = run_on(loop, run(args))
    keys = ("us_per_delivery", "intake_us", "delivery_us", "table_puts", "table_deletes", "table_bytes")
    result = {"at": time.time(), "cpu": cpu_model(), "cpus": os.cpu_count(), "event_loop": loop,
              "receivers": args.receivers, "per_receiver": args.per_receiver, "rounds": rounds,
              "min": {k: min(r[k] for r in rounds) for k in keys},
              "median": {k: statistics.median(r[k] for r in rounds) for k in keys}}
    path = save(result, args.out, "engine")
    low, mid = result["min"], result["median"]
    print(f"\n{os.cpu_count()} x {result['cpu']}, event loop {loop}; "
          f"{args.receivers:,} receivers x {args.per_receiver}, {args.rounds} rounds")
    print(f"engine CPU per delivery   min {low['us_per_delivery']:.1f} us, "
          f"median {mid['us_per_delivery']:.1f} us  (intake {mid['intake_us']:.1f}, "
          f"delivery and outcome {mid['delivery_us']:.1f})")
    print(f"table writes per delivery {mid['table_puts']:.2f} puts, {mid['table_deletes']:.2f} deletes, "
          f"{mid['table_bytes']:,.0f} bytes (changelog records before coalescing)")
    print(f"\nsaved {path}")
    return result


if __name__ == "__main__":
    main()
