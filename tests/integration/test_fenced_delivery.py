"""A delivery whose worker fell in doubt of its ownership while the request waited is never written.

The stall fence (`domain/stall_fence.py`) is asked as an attempt starts and
again as its request is written: a worker stopped (SIGSTOP, a VM pause)
while a request waited for its connection may have lost the receiver to
another worker by the time the connection is there. The deliverer, both
transports and the receiver are real; the fence's clock is the test's, so
"the loop stood still for 10 s" takes no 10 s.
"""

from __future__ import annotations

import asyncio

import orjson
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from dispatcher.deliverer import Deliverer, Job, lane_limits
from dispatcher.domain.addresses import AllowList, TargetPolicy
from dispatcher.domain.delivery_options import DeliveryOptions
from dispatcher.domain.evolve import evolve
from dispatcher.domain.records import Outcome, ReceiverConfig
from dispatcher.domain.signing import generate_secret
from dispatcher.domain.slots import SlotPool
from dispatcher.domain.stall_fence import StallFence
from dispatcher.http1 import Http1Transport
from dispatcher.target_guard import TargetGuard
from dispatcher.tracing import Tracing
from dispatcher.transport import AiohttpTransport
from tests.harness import Delivery, Receiver, wait_until

pytestmark = pytest.mark.integration

TRANSPORTS = {"aiohttp": AiohttpTransport, "http1": Http1Transport}
HELD, WAITING = ("r1", 3), ("r2", 5)  # receiver id, partition


def load_entries(receiver_id: str, seq: int, count: int, max_bytes: int) -> list[dict[str, object]]:
    return [{"id": f"msg_{receiver_id}_{seq}", "seq": seq, "type": "t.x", "data": {}, "headers": {},
             "accepted_at": 0.0}]


ATTEMPTS = ["message", "traced message", "batch", "transformed message", "heartbeat"]


def shaped(attempt: str, config: ReceiverConfig) -> ReceiverConfig:
    if attempt == "batch":
        return evolve(config, options=DeliveryOptions(ordering="none", batch_max=10))
    if attempt == "transformed message":
        return evolve(config, transform={"body": {"shaped": True}})
    return config


def start(deliverer: Deliverer, attempt: str, config: ReceiverConfig) -> None:
    """What r2's actor asks for: an attempt at its message (as each kind of receiver sends it) or
    an idle receiver's heartbeat."""
    if attempt == "heartbeat":
        deliverer.start_heartbeat(*WAITING, config, number=1, last_seq=0)
    else:
        deliverer.start(*WAITING, shaped(attempt, config), seq=1, attempt=1)


@pytest.mark.parametrize("attempt", ATTEMPTS)
@pytest.mark.parametrize("kind", sorted(TRANSPORTS))
async def test_a_request_that_waited_across_a_stall_is_held_back_and_tried_again(
    kind: str, attempt: str
) -> None:
    release = asyncio.Event()

    async def hold_r1(path: str, delivery: Delivery) -> int:
        if path == "r1":
            await release.wait()
        return 200

    receiver = await Receiver(hold_r1).start()
    now = [100.0]
    fence = StallFence(stall_limit=5.0, release_after=5.0)
    fence.tick(now[0])
    asked: list[int] = []

    def may_post(partition: int) -> bool:
        asked.append(partition)
        return fence.allows(now[0])

    reported: list[Outcome] = []
    lost: list[tuple[str, int]] = []

    async def sink(receiver_id: str, partition: int, outcome: Outcome) -> None:
        reported.append(outcome)

    guard = TargetGuard(TargetPolicy(AllowList.parse("127.0.0.1/32")))
    transport = TRANSPORTS[kind](guard, 5.0, 2.0, 4096, 1)  # one connection: the second request waits
    pool: SlotPool[Job] = SlotPool(lane_limits(4, 1), 4, {})
    deliverer = Deliverer(transport, sink, pool, load_entries,
                          lambda rid, partition: lost.append((rid, partition)), may_post=may_post)
    spans = InMemorySpanExporter()
    if attempt == "traced message":
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(spans))
        deliverer.tracing = Tracing(provider.get_tracer("test"), provider)

    def config(rid: str) -> ReceiverConfig:
        return ReceiverConfig(rid, receiver.url(rid), generate_secret())

    try:
        deliverer.start(*HELD, config("r1"), seq=1, attempt=1)
        await wait_until(lambda: len(receiver.deliveries) == 1, 10, "r1's request holding the connection")
        start(deliverer, attempt, config("r2"))
        await wait_until(lambda: WAITING[1] in asked, 10, "r2's attempt past its start check")

        now[0] += 10.0  # the loop stood still for 10 s while r2's request waited
        release.set()
        await wait_until(lambda: lost == [WAITING], 10, "r2's attempt given up, its receiver woken")
        assert [d.path for d in receiver.deliveries] == ["r1"], "r2's request reached the receiver"
        assert [o.msg_id for o in reported] == ["msg_r1_1"], "an outcome for an attempt never made"
        assert not deliverer.busy("r2"), "r2's slot stays taken"
        if attempt == "traced message":  # a span that says what happened, and no failed delivery
            held = [span for span in spans.get_finished_spans()
                    if (span.attributes or {}).get("webhook.receiver_id") == "r2"]
            assert [(span.attributes or {}).get("webhook.outcome") for span in held] == ["held_back"]
            assert held[0].status.status_code != StatusCode.ERROR and not held[0].events

        fence.on_assigned(now[0])  # the group confirms the partitions are still ours
        start(deliverer, attempt, config("r2"))  # what the woken actor asks for
        await wait_until(lambda: len(reported) == 2, 10, "r2's attempt made again")
        assert [d.path for d in receiver.deliveries] == ["r1", "r2"] and reported[1].ok
        body = orjson.loads(receiver.deliveries[1].body)
        if attempt == "batch":
            assert [event["id"] for event in body["events"]] == ["msg_r2_1"]
        elif attempt == "transformed message":
            assert body == {"shaped": True}
            assert deliverer.counts.transforms == {"ok": 1}, "the held-back run counted as a transform"
    finally:
        release.set()
        await deliverer.close()
        await receiver.stop()
