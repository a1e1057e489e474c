"""A worker stopped cleanly leaves its consumer group, so the worker after it is not kept waiting;
a static member (an instance id) hands its membership to its own restart instead.

The embedded broker numbers a group's first generation 0, from which aiokafka
never left; the next worker's join then waited out the stopped one's session
(the restart gap: docs/benchmarks.md, "Performance II").
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient

from dispatcher.broker import EmbeddedBroker
from dispatcher.membership import FILE_NAME as TICKET_FILE
from tests.harness import Api, Receiver, first_copies, wait_until


async def group_members(broker: EmbeddedBroker, group: str) -> list[str]:
    """The member ids the broker holds for the consumer group."""
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.url.removeprefix("kafka://"))
    await admin.start()
    try:
        [response] = await admin.describe_consumer_groups([group])
    finally:
        await admin.close()
    [described] = response.groups
    return [member[0] for member in described[5]]


async def test_a_worker_of_the_first_generation_leaves_its_group_on_sigterm(
    broker: EmbeddedBroker, make_worker: Any
) -> None:
    worker = make_worker("first")
    await worker.start().wait_ready()
    assert len(await group_members(broker, worker.app_id)) == 1
    worker.stop()  # SIGTERM, and wait for the exit
    assert worker.process.returncode == 0
    # Gone at once: not after its 6 s session, which the next worker's join used to wait out.
    assert await group_members(broker, worker.app_id) == []
    again = make_worker("again")
    await again.start().wait_ready()
    assert len(await group_members(broker, worker.app_id)) == 1


def handover_files(worker: Any) -> list[Path]:
    return list(worker.data_dir.rglob(TICKET_FILE))


async def delivered_in_order(receiver: Receiver, path: str, count: int) -> None:
    def seqs() -> list[int]:
        return [d.seq for d in first_copies([d for d in receiver.by_path(path) if d.seq])]

    await wait_until(lambda: len(seqs()) >= count, 60, f"{count} messages delivered to {path}")
    assert seqs() == list(range(1, count + 1))


async def create_receiver(api: Api, url: str) -> str:
    """Create a receiver; while the group settles the API may answer that its owner is moving."""
    for _ in range(120):  # bounded: about a minute
        status, body = await api.call("POST", "/v1/receivers", {"url": url})
        if status == 201:
            return str(body["id"])
        assert body["error"]["code"] in ("pending", "unavailable"), body
        await asyncio.sleep(0.5)
    raise AssertionError(f"no receiver created for {url}")


async def send(worker: Any, receiver_id: str, count: int) -> None:
    api = Api(worker.url)
    try:
        await api.send_batch([{"receiver_id": receiver_id, "event_type": "t.x", "payload": {"n": n}}
                              for n in range(count)])
    finally:
        await api.close()


async def each_of_16_receivers_gets_3_messages_in_order(worker: Any, receiver: Receiver) -> None:
    """16 receivers, spread over every worker's partitions: every seq 1..3 delivered to each, in order."""
    api = Api(worker.url)
    try:
        rids = {f"r{i}": await create_receiver(api, receiver.url(f"r{i}")) for i in range(16)}
    finally:
        await api.close()
    for rid in rids.values():
        await send(worker, rid, 3)
    for path in rids:
        await delivered_in_order(receiver, path, 3)


async def test_a_static_member_resumes_its_membership_after_a_clean_stop(
    broker: EmbeddedBroker, make_worker: Any, receiver: Receiver
) -> None:
    # A long session: a restart slowed down by a busy machine still comes within it (a ticket is
    # tried only while the session surely runs).
    worker = make_worker("static", DISPATCHER_INSTANCE_ID="pod-0", DISPATCHER_SESSION_TIMEOUT="20")
    await worker.start().wait_ready()
    api = Api(worker.url)
    try:
        rid = (await api.create_receiver(receiver.url("r")))["id"]
    finally:
        await api.close()
    await send(worker, rid, 5)
    await delivered_in_order(receiver, "r", 5)
    [member] = await group_members(broker, worker.app_id)
    worker.stop()  # SIGTERM: a static member stays in the group, and writes its membership down
    assert worker.process.returncode == 0
    assert len(handover_files(worker)) == 1
    assert await group_members(broker, worker.app_id) == [member]
    await worker.start().wait_ready()
    # Resumed, not joined: the worker says so, the broker holds the same member, and the hand-over
    # is used up.
    assert "resumed the membership of consumer group" in worker.log_path.read_text()
    assert await group_members(broker, worker.app_id) == [member]
    assert handover_files(worker) == []
    await send(worker, rid, 5)
    await delivered_in_order(receiver, "r", 10)


async def test_a_handover_the_group_has_moved_past_is_a_normal_join(
    broker: EmbeddedBroker, make_worker: Any, receiver: Receiver
) -> None:
    first = make_worker("first", DISPATCHER_INSTANCE_ID="pod-0")
    await first.start().wait_ready()
    first.stop()
    assert len(handover_files(first)) == 1
    # Another worker joins meanwhile: a new generation, whose assignment is not the written one. (A
    # dynamic one: on the embedded broker a second static member's join waited for the stopped
    # one for over 90 s; a dynamic member's join ends the silent member's session.)
    other = make_worker("other")
    await other.start().wait_ready()
    await first.start().wait_ready()
    log = first.log_path.read_text()
    assert "the membership handed over by the clean stop does not hold (" in log
    assert "resumed the membership" not in log
    assert handover_files(first) == []
    members = await group_members(broker, first.app_id)
    assert len(members) == 2
    await each_of_16_receivers_gets_3_messages_in_order(first, receiver)


async def test_beside_other_workers_a_restart_resumes_only_what_the_broker_shows_it(
    broker: EmbeddedBroker, make_worker: Any, receiver: Receiver
) -> None:
    """The embedded broker shows no member's assignment and keeps a group's generation when a static
    member re-forms it, so a heartbeat cannot prove the written assignment still this member's once
    the group has others: the restart joins (Kafka shows each member's assignment; there it resumes
    when the broker shows the written one)."""
    # A 10 s session lets a ticket be used for 8 s: a stop and restart on a slow machine stays within it,
    # so the refusal is for the reason under test, not the ticket's age.
    static = make_worker("static", DISPATCHER_INSTANCE_ID="pod-0", DISPATCHER_SESSION_TIMEOUT="10")
    other = make_worker("other", DISPATCHER_SESSION_TIMEOUT="10")
    await static.start().wait_ready()
    await other.start().wait_ready()
    await wait_until(lambda: "partitions owned=" in other.log_path.read_text(), 30,
                     "the other worker's assignment")
    static.stop()
    assert len(handover_files(static)) == 1
    await static.start().wait_ready()
    log = static.log_path.read_text()
    assert "(the group has other members and the broker shows no assignments)" in log
    assert "resumed the membership" not in log
    await each_of_16_receivers_gets_3_messages_in_order(static, receiver)
