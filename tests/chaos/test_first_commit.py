"""A worker killed before its first offset commit: its successor processes every record.

With no committed offset, Faust's seek after recovery leaves a source partition
where its fetch already was, and the records fetched while that seek ran are
dropped as stale (see kafka_transport._Consumer). The successor must read such
partitions from their start again, or the records before its fetch position
are never processed: messages accepted and never delivered.
"""

from __future__ import annotations

import pytest

from dispatcher.broker import EmbeddedBroker
from dispatcher.client import DispatcherProducer
from dispatcher.partitioning import partitioner
from tests.harness import Api, Receiver, first_copies, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

RECEIVERS = 24


async def test_a_successor_processes_the_records_of_partitions_never_committed(
    make_worker, broker: EmbeddedBroker
) -> None:
    recv = await Receiver().start()
    # No commit within the test (1 h), and the same instance id: the successor joins at once,
    # fetching from the start of partitions that hold records and no committed offset.
    env = {"DISPATCHER_COMMIT_INTERVAL": "3600", "DISPATCHER_INSTANCE_ID": "first-commit-0"}
    worker = make_worker("a", **env).start()
    await worker.wait_ready()
    api = Api(worker.url)
    try:
        ids = [f"fc{n}" for n in range(RECEIVERS)]
        for rid in ids:
            await api.create_receiver(recv.url(rid), id=rid)
        assert len({partitioner(8)(rid) for rid in ids}) == 8, "every partition holds records"
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
