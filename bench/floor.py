"""The stack's floor: a bare aiokafka consumer POSTing each record, with no engine and no state.

The drain's records (N messages of 1 KiB to R receivers, keyed by receiver id,
on a topic with the worker's partition count) are produced first; then one
consumer on the worker's kind of event loop reads them from the start and
POSTs each record's value through the worker's own HTTP client
(`Http1Transport`), one request in flight per receiver, in the topic's
order. Nothing is decoded but the message id, nothing is signed, stored,
retried or committed: what it costs is what any engine on aiokafka and this
HTTP client pays before doing anything of its own. The drain's worker CPU
per 1,000 deliveries minus this is what the engine and its durability cost.

It runs in the bench's process: the CPU is the process's from the consumer's
start (every record's fetch and decoding included) to the last answer; the
rate is nginx's first to last arrival (as the drain's).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque

import orjson
from aiokafka import AIOKafkaConsumer

from dispatcher.domain.addresses import AllowList, TargetPolicy
from dispatcher.http1 import Http1Transport
from dispatcher.settings import Settings
from dispatcher.target_guard import TargetGuard
from dispatcher.transport import DeliveryError

FETCH_MAX_WAIT_MS = 2  # the dev worker's (the embedded broker answers a fetch when its wait runs out)


class _Sender:
    """One receiver's queue: records go out one at a time, in the order they were read."""

    def __init__(self, url: str, transport: Http1Transport, done: _Countdown) -> None:
        self.url = url
        self.transport = transport
        self.done = done
        self.queue: deque[bytes] = deque()
        self.seq = 0
        self.running = False
        self.task: asyncio.Task[None] | None = None  # held: the loop keeps only a weak reference

    def add(self, value: bytes) -> None:
        self.queue.append(value)
        if not self.running:
            self.running = True
            self.task = asyncio.get_running_loop().create_task(self._send_all())

    async def _send_all(self) -> None:
        try:
            while self.queue:
                value = self.queue.popleft()
                self.seq += 1
                headers = {"content-type": "application/json", "webhook-id": orjson.loads(value)["id"],
                           "webhook-sequence": str(self.seq)}
                response = await self.transport.post(self.url, headers, value)
                if response.status != 200:
                    raise RuntimeError(f"{self.url} answered {response.status}")
                self.done.tick()
        except (RuntimeError, DeliveryError) as exc:  # the run stops now, not at its time limit
            self.done.fail(exc)
        self.running = False


class _Countdown:
    def __init__(self, total: int) -> None:
        self.left = total
        self.error: Exception | None = None
        self.finished = asyncio.Event()

    def tick(self) -> None:
        self.left -= 1
        if self.left <= 0:
            self.finished.set()

    def fail(self, error: Exception) -> None:
        self.error = error
        self.finished.set()


async def consume_and_post(servers: str, topic: str, urls: dict[bytes, str], total: int,
                           limit: float = 600.0) -> float:
    """Read `total` records of `topic` from its start and POST each to `urls[key]`; the CPU seconds.

    The CPU is the process's from the consumer's start to the last answer.
    """
    s = Settings()
    guard = TargetGuard(TargetPolicy(AllowList.parse("127.0.0.0/8")))
    transport = Http1Transport(guard, s.timeout, s.connect_timeout, s.response_cap, len(urls))
    done = _Countdown(total)
    senders = {key: _Sender(url, transport, done) for key, url in urls.items()}
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=servers, group_id=None,
                                auto_offset_reset="earliest", enable_auto_commit=False,
                                fetch_max_wait_ms=FETCH_MAX_WAIT_MS)
    await consumer.start()
    read, cpu0 = 0, time.process_time()  # before the first fetch: decoding records is the consumer's work
    deadline = time.monotonic() + limit
    try:
        while read < total and time.monotonic() < deadline and done.error is None:
            batches = await consumer.getmany(timeout_ms=100)
            for records in batches.values():
                for record in records:
                    senders[record.key].add(record.value)
                read += len(records)
        await asyncio.wait_for(done.finished.wait(), max(1.0, deadline - time.monotonic()))
        if done.error is not None:
            raise done.error
        return time.process_time() - cpu0
    finally:
        await consumer.stop()
        await transport.close()
