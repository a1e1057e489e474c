"""Two workers: a request about one receiver is answered by its owner, whichever worker it reaches."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import aiohttp

from tests.harness import Api, Receiver, WorkerProcess, wait_until


async def owned(worker: WorkerProcess) -> set[int]:
    async with aiohttp.ClientSession() as session, session.get(worker.url + "/readyz") as resp:
        return set((await resp.json())["partitions"])


async def test_state_and_message_status_come_from_the_owner_on_either_worker(
    make_worker: Callable[..., WorkerProcess],
) -> None:
    workers = [make_worker("a").start(), make_worker("b").start()]
    for w in workers:
        await w.wait_ready()
    for _ in range(240):  # up to 60 s for the group to split the partitions
        parts = [await owned(w) for w in workers]
        if all(parts) and not parts[0] & parts[1]:
            break
        await asyncio.sleep(0.25)
    assert all(parts), "both workers own partitions"
    server = await Receiver().start()
    apis = [Api(w.url) for w in workers]
    try:
        rids = [(await apis[i % 2].create_receiver(server.url(f"r{i}"), id=f"r{i}"))["id"] for i in range(16)]
        await apis[0].send_batch([
            {"receiver_id": rid, "event_type": "t.x", "payload": {}, "id": f"m-{rid}"} for rid in rids
        ])
        await wait_until(lambda: len(server.completed) == len(rids), 60, "one delivery each")

        owners = set()
        for rid in rids:
            answers = []
            for api in apis:  # ask both: the non-owner forwards to the owner
                status, state = await api.call("GET", f"/v1/receivers/{rid}/state")
                assert status == 200, state
                answers.append(state)
            assert answers[0] == answers[1], rid
            owner = next(i for i, p in enumerate(parts) if answers[0]["partition"] in p)
            owners.add(owner)
            assert answers[0]["owner"] == workers[owner].url, "answered by the owner"
            assert (answers[0]["delivered_seq"], answers[0]["delivered"]) == (1, 1)
            for api in apis:
                status, message = await api.call("GET", f"/v1/receivers/{rid}/messages/m-{rid}")
                assert (status, message["status"], message["seq"]) == (200, "delivered", 1), message
        assert owners == {0, 1}, "receivers on both workers' partitions"
        status, missing = await apis[1].call("GET", "/v1/receivers/r0/messages/never-sent")
        assert status == 404 and missing["error"]["field"] == "message_id"
    finally:
        for api in apis:
            await api.close()
        await server.stop()
