"""Latest-per-key coalescing on the embedded broker: a backlog drains to each key's newest; what gave
way reads `superseded` in the message status, the catch-up and /metrics; one out is never superseded."""

from __future__ import annotations

import asyncio
import re

import aiohttp
import orjson
import pytest

from tests.harness import Api, Delivery, Receiver, WorkerProcess, wait_until

pytestmark = pytest.mark.integration


def keyed(rid: str, n: int, key: str) -> dict[str, object]:
    """Message n of `key` ("" for one without a key)."""
    payload = {"k": key, "n": n}
    message = {"receiver_id": rid, "event_type": "coalesce.test", "id": f"{rid}-{n}", "payload": payload}
    return {**message, "ordering_key": key} if key else message


async def superseded_total(worker: WorkerProcess) -> float:
    async with aiohttp.ClientSession() as session, session.get(f"{worker.url}/metrics") as response:
        text = await response.text()
    found = re.search(r"^webhook_dispatcher_messages_superseded_total (\S+)$", text, re.MULTILINE)
    assert found, "the counter is exported"
    return float(found.group(1))


async def test_a_paused_backlog_drains_to_each_keys_newest(api: Api, worker: WorkerProcess) -> None:
    before = await superseded_total(worker)
    async with Receiver() as recv:
        rid = (await api.create_receiver(recv.url("c"), ordering="key", coalesce=True, max_in_flight=4))["id"]
        assert (await api.call("POST", f"/v1/receivers/{rid}/pause"))[0] == 200
        keys = ["a", "b", "a", "c", "b", "a", "", ""]  # the last of a, b, c, and both without a key
        await api.send_batch([keyed(rid, n, key) for n, key in enumerate(keys)])
        await api.eventually_state(rid, lambda s: s["backlog"] == len(keys), 30, "all stored")
        assert (await api.call("POST", f"/v1/receivers/{rid}/resume"))[0] == 200
        await api.eventually_state(rid, lambda s: s["backlog"] == 0, 30, "an empty backlog")
        got = sorted(orjson.loads(d.body)["data"]["n"] for d in recv.deliveries)
        assert got == [3, 4, 5, 6, 7], "c's only, b's and a's newest, and the two without a key"
        status, body = await api.call("GET", f"/v1/receivers/{rid}/messages/{rid}-0")
        assert (status, body["status"], body["superseded_by"]) == (200, "superseded", 6)
        status, body = await api.call("GET", f"/v1/receivers/{rid}/messages/{rid}-5")
        assert (status, body["status"]) == (200, "delivered")
        status, body = await api.call("GET", f"/v1/receivers/{rid}/events?after_seq=0")
        assert status == 200
        assert [e["status"] for e in body["events"]] == ["superseded"] * 3 + ["delivered"] * 5
        status, body = await api.call("POST", f"/v1/receivers/{rid}/messages/{rid}-1/resend")
        assert (status, body["error"]["code"]) == (409, "not_delivered")
    assert await superseded_total(worker) == before + 3


async def test_one_out_is_never_superseded_and_the_newest_follows_it(api: Api) -> None:
    release = asyncio.Event()

    async def hold_first(path: str, delivery: Delivery) -> int:
        if orjson.loads(delivery.body)["data"]["n"] == 0:
            await release.wait()
        return 200

    async with Receiver(hold_first) as recv:
        rid = (await api.create_receiver(recv.url("h"), ordering="key", coalesce=True, max_in_flight=4))["id"]
        await api.send_batch([keyed(rid, 0, "a")])
        await wait_until(lambda: len(recv.deliveries) == 1, 30, "the first one out")
        await api.send_batch([keyed(rid, n, "a") for n in (1, 2, 3)])
        await api.eventually_state(rid, lambda s: s["next_seq"] == 5, 30, "all four stored")
        release.set()
        await api.eventually_state(rid, lambda s: s["backlog"] == 0, 30, "an empty backlog")
        got = [orjson.loads(d.body)["data"]["n"] for d in recv.deliveries]
        assert got == [0, 3], "the one out finished, then the newest"
        for n, status in ((0, "delivered"), (1, "superseded"), (2, "superseded"), (3, "delivered")):
            answer = await api.call("GET", f"/v1/receivers/{rid}/messages/{rid}-{n}")
            assert answer[1]["status"] == status, answer
