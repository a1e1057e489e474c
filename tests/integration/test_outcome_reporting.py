"""An outcome that cannot be reported is sent again, and if it is lost the attempt is made again.

The deliverer posts for real (aiohttp, to a loopback receiver); only the sink
the outcome goes to, normally a Kafka produce, is a function that fails on cue.
"""

from __future__ import annotations

from dispatcher.deliverer import REPORT_TRIES, Deliverer, Job, lane_limits
from dispatcher.domain.addresses import AllowList, TargetPolicy
from dispatcher.domain.records import Outcome, ReceiverConfig
from dispatcher.domain.signing import generate_secret
from dispatcher.domain.slots import SlotPool
from dispatcher.target_guard import TargetGuard
from dispatcher.transport import AiohttpTransport
from tests.harness import Receiver, wait_until


class FlakySink:
    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.tries = 0
        self.reported: list[Outcome] = []

    async def __call__(self, receiver_id: str, partition: int, outcome: Outcome) -> None:
        self.tries += 1
        if self.tries <= self.failures:
            raise ConnectionError("broker unreachable")
        self.reported.append(outcome)


def make_deliverer(sink: FlakySink, lost: list[tuple[str, int]]) -> Deliverer:
    guard = TargetGuard(TargetPolicy(AllowList.parse("127.0.0.1/32")))
    transport = AiohttpTransport(guard, timeout=5, connect_timeout=2, response_cap=4096, limit=4)
    pool: SlotPool[Job] = SlotPool(lane_limits(4, 1), 4, {})
    return Deliverer(
        transport, sink, pool, load_entry, lambda rid, p: lost.append((rid, p)), report_backoff=0.01
    )


ENTRY = {"id": "msg_1", "seq": 1, "type": "t.x", "data": {}, "accepted_at": 0.0}


def load_entry(receiver_id: str, seq: int, count: int, max_bytes: int) -> list[dict[str, object]]:
    return [ENTRY] if seq == 1 else []


async def test_a_failed_report_is_sent_again(receiver: Receiver) -> None:
    sink, lost = FlakySink(failures=REPORT_TRIES - 1), []
    deliverer = make_deliverer(sink, lost)
    config = ReceiverConfig("r1", receiver.url("ok"), generate_secret())
    try:
        deliverer.start("r1", 3, config, seq=1, attempt=1)
        await wait_until(lambda: sink.reported, 10, "the outcome, on the last try")
        assert (sink.tries, sink.reported[0].attempt, sink.reported[0].ok) == (REPORT_TRIES, 1, True)
        assert lost == [] and deliverer.busy("r1"), "the slot waits for the actor's release"
        assert len(receiver.deliveries) == 1
    finally:
        await deliverer.close()


async def test_a_lost_outcome_frees_the_slot_and_wakes_the_receiver(receiver: Receiver) -> None:
    sink, lost = FlakySink(failures=10 * REPORT_TRIES), []
    deliverer = make_deliverer(sink, lost)
    config = ReceiverConfig("r1", receiver.url("ok"), generate_secret())
    try:
        deliverer.start("r1", 3, config, seq=1, attempt=1)
        await wait_until(lambda: lost, 10, "the lost outcome")
        assert lost == [("r1", 3)] and sink.tries == REPORT_TRIES
        assert not deliverer.busy("r1"), "the receiver may be tried again"
        deliverer.start("r1", 3, config, seq=1, attempt=1)  # what the woken actor asks for
        await wait_until(lambda: len(receiver.deliveries) == 2, 10, "the attempt made again")
        assert {d.msg_id for d in receiver.deliveries} == {"msg_1"}
    finally:
        await deliverer.close()
