"""Two workers: a request about one receiver is answered by its owner, whichever worker it reaches."""

from __future__ import annotations

from collections.abc import Callable

from tests.harness import Api, Receiver, WorkerProcess, wait_assigned, wait_until


async def two_workers(
    make_worker: Callable[..., WorkerProcess],
) -> tuple[list[WorkerProcess], list[set[int]]]:
    """Two workers, once the group has split the partitions between them and both are ready."""
    workers = [make_worker("a").start(), make_worker("b").start()]
    for w in workers:
        await w.wait_ready()
    split = await wait_assigned(workers, "the two workers sharing the partitions")
    return workers, [set(split[w.data_dir.name]) for w in workers]


async def test_state_and_message_status_come_from_the_owner_on_either_worker(
    make_worker: Callable[..., WorkerProcess],
) -> None:
    workers, parts = await two_workers(make_worker)
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


async def test_listing_merges_both_workers_pages_in_id_order(
    make_worker: Callable[..., WorkerProcess],
) -> None:
    workers, _ = await two_workers(make_worker)
    api = Api(workers[1].url)
    try:
        for i in range(23):
            extra = {"tenant": "acme"} if i % 3 == 0 else {}
            types = ["order.*"] if i % 2 == 0 else ["invoice.paid"]
            await api.create_receiver(f"http://127.0.0.1:9/l{i}", id=f"l{i:02d}", event_types=types, **extra)
        assert (await api.call("POST", "/v1/receivers/l05/pause"))[0] == 200

        seen: list[str] = []
        cursor = None
        for _ in range(10):  # 23 receivers, 5 a page: 5 pages
            query = "limit=5" + (f"&cursor={cursor}" if cursor else "")
            status, page = await api.call("GET", f"/v1/receivers?{query}")
            assert status == 200, page
            seen += [r["id"] for r in page["receivers"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert seen == [f"l{i:02d}" for i in range(23)], "every receiver once, in id order, from both workers"
        owners = {(await api.call("GET", f"/v1/receivers/{rid}/state"))[1]["owner"] for rid in seen}
        assert owners == {w.url for w in workers}

        async def ids(query: str) -> list[str]:
            status, page = await api.call("GET", f"/v1/receivers?{query}")
            assert status == 200, page
            return [r["id"] for r in page["receivers"]]

        assert await ids("tenant=acme") == [f"l{i:02d}" for i in range(0, 23, 3)]
        assert await ids("event_type=order.shipped") == [f"l{i:02d}" for i in range(0, 23, 2)]
        assert await ids("status=paused") == ["l05"]
        status, bad = await api.call("GET", "/v1/receivers?status=sleepy")
        assert status == 422 and bad["error"]["field"] == "status"
    finally:
        await api.close()
