"""A worker killed after a burst has every receiver's state back, to the last record, whether it
keeps its local store or rebuilds it from the changelog; one stopped cleanly keeps it on disk."""

from __future__ import annotations

import asyncio

import orjson
import pytest
from rocksdict import AccessType, Options, Rdict

from dispatcher.domain import keys
from dispatcher.partitioning import partitioner
from tests.harness import Api, Receiver, first_copies, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

MESSAGES = 300


@pytest.mark.parametrize("local_store", ["kept", "lost"])
async def test_state_rebuilt_from_changelog_after_kill9_is_complete(make_worker, local_store) -> None:
    """Kept: the local store is a prefix of the changelog and recovery reads the rest. Lost (a new
    disk): every receiver is rebuilt from the whole changelog."""
    recv = await Receiver().start()
    worker = make_worker("a", DISPATCHER_LIBRARY_LOG_LEVEL="info").start()  # the services' stops are logged
    await worker.wait_ready()
    api = Api(worker.url)
    try:
        rid = (await api.create_receiver(recv.url("r"), id="r"))["id"]
        assert (await api.call("POST", f"/v1/receivers/{rid}/pause"))[0] == 200
        # One API batch to a paused receiver: the last table writes are the intake's, and they
        # leave in multi-record changelog batches, whose tail a short recovery would miss.
        sent = [{"receiver_id": rid, "event_type": "t.x", "payload": {"n": n}, "id": f"m{n}"}
                for n in range(1, MESSAGES + 1)]
        await api.send_batch(sent)
        await api.eventually_state(rid, lambda s: s["backlog"] == MESSAGES, 60, "the burst stored")
        await asyncio.sleep(3)  # past a commit (1 s): nothing is re-read after the restart
        await api.close()

        worker.kill9()
        if local_store == "lost":
            worker.data_dir = worker.data_dir.with_name(worker.data_dir.name + "-new")
        worker.start()
        await worker.wait_ready(120)
        api = Api(worker.url)
        state = await api.state(rid)
        assert (state["next_seq"], state["backlog"], state["paused"]) == (MESSAGES + 1, MESSAGES, True)

        # The dedup entries came back too: resent ids are not enqueued again.
        await api.send_batch([*sent[-5:], {**sent[0], "id": "new"}])
        await api.eventually_state(rid, lambda s: s["next_seq"] == MESSAGES + 2, 60, "the new message stored")
        assert (await api.call("POST", f"/v1/receivers/{rid}/resume"))[0] == 200
        await wait_until(lambda: len(first_copies(recv.completed)) == MESSAGES + 1, 120, "the backlog sent")
        firsts = first_copies(recv.deliveries)
        assert [d.msg_id for d in firsts] == [m["id"] for m in sent] + ["new"]
        assert [d.seq for d in firsts] == list(range(1, MESSAGES + 2))
    finally:
        await api.close()
        await recv.stop()


async def test_a_clean_stop_leaves_every_write_on_disk(make_worker) -> None:
    """The table's RocksDB writes skip the WAL; a clean stop must still leave them on disk, so the next
    start reads the local store instead of the changelog."""
    recv = await Receiver().start()
    worker = make_worker("a", DISPATCHER_LIBRARY_LOG_LEVEL="info").start()  # the services' stops are logged
    await worker.wait_ready()
    api = Api(worker.url)
    try:
        rid = (await api.create_receiver(recv.url("r"), id="r"))["id"]
        assert (await api.call("POST", f"/v1/receivers/{rid}/pause"))[0] == 200
        await api.send_batch([{"receiver_id": rid, "event_type": "t.x", "payload": {"n": n}, "id": f"m{n}"}
                              for n in range(1, MESSAGES + 1)])
        await api.eventually_state(rid, lambda s: s["backlog"] == MESSAGES, 60, "the burst stored")
    finally:
        await api.close()
        await recv.stop()
    worker.stop()
    assert worker.process is not None and worker.process.returncode == 0
    # Every background service ended with the stop: none left a task behind or died on the way out.
    log = worker.log_path.read_text()
    assert "Task was destroyed but it is pending" not in log
    assert "Traceback" not in log
    # The consumer's last commit flushes the table: the table's sender and the stall fence stop after it.
    stops = [line for line in log.splitlines() if line.endswith("Stopping... ")]

    def stop_of(name: str) -> int:
        return next(i for i, line in enumerate(stops) if f"{name}]: Stopping" in line)

    assert stop_of("-_Consumer") < stop_of("ChangelogTable") and stop_of("-_Consumer") < stop_of("Fence")

    stores = list(worker.data_dir.glob(f"*/tables/*-{partitioner(8)(rid)}.db"))
    assert len(stores) == 1, f"one store of the receiver's partition, found {stores}"
    db = Rdict(str(stores[0]), options=Options(raw_mode=True), access_type=AccessType.read_only())
    try:
        raw = db.get(keys.state_key(rid))
        assert raw is not None, "the receiver's state is on disk"
        assert orjson.loads(raw)["next_seq"] == MESSAGES + 1
        assert db.get(keys.backlog_key(rid, MESSAGES)) is not None, "the last message is on disk"
    finally:
        db.close()
