"""The embedded broker's own consumer-group timings, with bare aiokafka consumers (no worker).

How long a consumer waits from `subscribe` to its partitions, by case: the first
member of a new group; a member after one that stopped without leaving (as
aiokafka stops from the embedded broker's generation 0); after one that left;
a static member (`group_instance_id`) after one of the same id. Each case runs
at every session timeout asked for. This is what a worker's restart gap is made
of once the worker's own parts are taken away (docs/benchmarks.md, "Performance
II"). Figures are printed, never asserted; the JSON is saved under bench/results/.

    python -m bench.group_timings                  # sessions of 3, 6 and 10 s
    python -m bench.group_timings --quick          # one session of 2 s
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition

from dispatcher.broker import EmbeddedBroker, free_port
from dispatcher.overrides.leave import leave_on_stop
from tests.harness import create_topic

from .runs import RESULTS, run_on, save, worker_loop
from .suite import cpu_model, progress

TOPIC = "timings"


class _Assigned(ConsumerRebalanceListener):  # type: ignore[misc]  # aiokafka's class is untyped
    def __init__(self) -> None:
        self.event = asyncio.Event()

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        pass

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        if assigned:
            self.event.set()


class Member:
    """One consumer of the group, polling in the background so that it heartbeats and rejoins."""

    def __init__(self, servers: str, group: str, session_s: float, instance_id: str | None) -> None:
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=servers, group_id=group, enable_auto_commit=False,
            session_timeout_ms=int(session_s * 1000), heartbeat_interval_ms=1000,
            rebalance_timeout_ms=int(session_s * 2000), group_instance_id=instance_id)
        self.poll: asyncio.Task[None] | None = None

    async def join(self) -> float:
        """Seconds from subscribing to the first assignment."""
        listener = _Assigned()
        await self.consumer.start()
        self.consumer.subscribe([TOPIC], listener=listener)
        t0 = time.monotonic()
        self.poll = asyncio.create_task(self._poll())
        await asyncio.wait_for(listener.event.wait(), 120)
        return time.monotonic() - t0

    async def _poll(self) -> None:
        while True:
            await self.consumer.getmany(timeout_ms=100)

    async def stop(self, leave: bool) -> None:
        """Stop; `leave`: leave the group whatever its generation, as the worker does (`leave.py`)."""
        if self.poll is not None:
            self.poll.cancel()
        if leave:
            leave_on_stop(self.consumer)
        await self.consumer.stop()


async def cases(servers: str, session_s: float) -> dict[str, float]:
    """Each case's wait for one session timeout, in a group of its own."""
    out: dict[str, float] = {}
    group = f"g{int(session_s * 1000)}"
    first = Member(servers, group, session_s, None)
    out["new_group"] = await first.join()
    await first.stop(leave=False)  # generation 0: aiokafka does not leave from it
    second = Member(servers, group, session_s, None)
    out["after_a_stop_without_leave"] = await second.join()
    await second.stop(leave=True)
    third = Member(servers, group, session_s, None)
    out["after_a_leave"] = await third.join()
    await third.stop(leave=True)
    for n in range(2):
        static = Member(servers, group + "-static", session_s, "static-0")
        out["static_first" if n == 0 else "static_again"] = await static.join()
        await static.stop(leave=False)  # a static member never leaves: it is expected back
    return {k: round(v, 2) for k, v in out.items()}


async def run(sessions: list[float]) -> dict[str, Any]:
    broker = EmbeddedBroker(free_port()).start()
    servers = broker.url.removeprefix("kafka://")
    try:
        await create_topic(servers, TOPIC, 8)
        found = {}
        for session_s in sessions:
            found[str(session_s)] = await cases(servers, session_s)
            progress(f"session {session_s} s: {found[str(session_s)]}")
        return found
    finally:
        broker.stop()


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--sessions", type=lambda s: [float(x) for x in s.split(",")],
                        default=[3.0, 6.0, 10.0], help="session timeouts in seconds, comma-separated")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    sessions = [2.0] if args.quick else args.sessions
    result: dict[str, Any] = {"at": time.time(), "cpu": cpu_model(), "cpus": os.cpu_count(),
              "seconds_to_assignment": run_on(worker_loop(), run(sessions))}
    path = save(result, args.out, "group-timings")
    print("\nseconds from subscribe to assignment, by session timeout")
    for session_s, found in result["seconds_to_assignment"].items():
        print(f"  session {session_s} s: " + ", ".join(f"{k} {v}" for k, v in found.items()))
    print(f"\nsaved {path}")
    return result


if __name__ == "__main__":
    main()
