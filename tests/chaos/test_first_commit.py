"""A successor worker processes every record left after its predecessor's kill -9.

After recovery Faust seeks the source partitions to their committed offsets one
at a time (a committed-offset request each) while fetching goes on, and leaves a
partition with no committed offset where its fetch was; the records that arrive
meanwhile are dropped as possibly stale (see dispatcher/overrides/consumer.py). Unless
every source partition is sought again at once, records fetched after their own
partition's seek, or before a seek that never moved, are never processed:
messages accepted and never delivered. Both cases: a predecessor killed before
its first commit, and one killed after commits, with messages produced since.
"""

from __future__ import annotations

import asyncio

import pytest

from dispatcher.broker import EmbeddedBroker
from dispatcher.client import DispatcherProducer
from dispatcher.partitioning import partitioner
from tests.harness import Api, Receiver, first_copies, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

RECEIVERS = 24


@pytest.mark.parametrize("committed", [False, True], ids=["never-committed", "committed"])
async def test_a_successor_processes_every_record_left_after_a_kill9(
    make_worker, broker: EmbeddedBroker, committed: bool
) -> None:
    recv = await Receiver().start()
    # The same instance id: the successor joins at once, without waiting out a session.
    # Never committed: no commit within the test (1 h). Committed: every 0.2 s.
    env = {"DISPATCHER_COMMIT_INTERVAL": "0.2" if committed else "3600",
           "DISPATCHER_INSTANCE_ID": "first-commit-0"}
    worker = make_worker("a", **env).start()
    await worker.wait_ready()
    api = Api(worker.url)
    try:
        ids = [f"fc{n}" for n in range(RECEIVERS)]
        for rid in ids:
            await api.create_receiver(recv.url(rid), id=rid)
        assert len({partitioner(8)(rid) for rid in ids}) == 8, "every partition holds records"
        if committed:
            await asyncio.sleep(1.0)  # past a few commits: the successor starts from committed offsets
        worker.kill9()

        async with DispatcherProducer(broker.url.removeprefix("kafka://"), app_id=worker.app_id) as producer:
            sent = {rid: await producer.send_message(rid, "first.commit", {"rid": rid}) for rid in ids}
        worker.start()
        await wait_until(lambda: len(first_copies(recv.completed)) >= RECEIVERS, 90, "one message each")
        got = {d.path: d.msg_id for d in first_copies(recv.completed)}
        assert got == sent, "lost or misrouted"
        assert [d.seq for d in first_copies(recv.completed)] == [1] * RECEIVERS
    finally:
        await api.close()
        await recv.stop()
