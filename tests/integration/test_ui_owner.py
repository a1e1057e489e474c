"""The console on two workers: a receiver's pages and actions are answered by its owner, whichever
worker the browser talks to, and the overview lists both workers."""

from __future__ import annotations

import re
from collections.abc import Callable

import aiohttp

from tests.harness import TOKEN, Api, WorkerProcess
from tests.integration.test_owner_routing import two_workers


async def logged_in(worker: WorkerProcess) -> aiohttp.ClientSession:
    session = aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))  # 127.0.0.1's cookie
    async with session.post(worker.url + "/ui/login", data={"token": TOKEN}, allow_redirects=False) as resp:
        assert resp.status == 303
    return session


async def test_a_receivers_page_and_actions_reach_its_owner_through_either_worker(
    make_worker: Callable[..., WorkerProcess],
) -> None:
    workers, _ = await two_workers(make_worker)
    api = Api(workers[0].url)
    session = await logged_in(workers[0])  # the cookie is good on both: its key comes from the token
    try:
        rids = [(await api.create_receiver(f"http://127.0.0.1:9/o{i}", id=f"o{i}"))["id"] for i in range(8)]
        owners = {rid: (await api.call("GET", f"/v1/receivers/{rid}/state"))[1]["owner"] for rid in rids}
        remote = next(rid for rid in rids if owners[rid].rstrip("/").endswith(str(workers[1].port)))
        async with session.get(f"{workers[0].url}/ui/receivers/{remote}") as resp:
            page = await resp.text()
            assert resp.status == 200 and remote in page
            assert resp.headers["Content-Security-Policy"].startswith("default-src 'none'")
        csrf = re.search(r'name="csrf" value="([^"]+)"', page)
        assert csrf is not None
        async with session.post(f"{workers[0].url}/ui/receivers/{remote}/control/pause",
                                data={"csrf": csrf[1]}, allow_redirects=False) as resp:
            assert resp.status == 303
            assert resp.headers["Location"].endswith(f"/ui/receivers/{remote}?done=pause")
        assert (await api.state(remote))["paused"]
        status, _ = await api.call("POST", "/v1/messages", {"receiver_id": remote, "event_type": "t.held",
                                                            "payload": {}})
        assert status == 202
        await api.eventually_state(remote, lambda s: s["backlog"] == 1, 30, "the message held")
        async with session.get(f"{workers[1].url}/ui/") as resp:
            overview = await resp.text()
        assert all(w.url in overview for w in workers) and "no answer" not in overview
        # the other worker's counts and its held receiver, from the lag book /metrics reads
        assert re.search(r"pill-paused\">paused</span> <strong>1</strong>", overview)
        assert f'href="/ui/receivers/{remote}"' in overview.split("Oldest undelivered")[1]
        async with session.get(f"{workers[1].url}/ui/receivers?status=paused") as resp:
            assert remote in await resp.text()  # the list merges both workers' receivers
    finally:
        await session.close()
        await api.close()
