"""The console on a real aiohttp server (a fake engine): shutdown ends open tails, logins under a
throttled address, the session cookie behind a TLS proxy, numeric fields, the catch-up search's caps."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import pytest
from aiohttp import ClientSession, web
from aiohttp.test_utils import TestServer

from web.engine import ENGINE
from web.ui import receiver as ui_receiver
from web.ui import setup_ui
from web.ui.session import COOKIE, SessionKeys

TOKEN = "the-api-token"
RID = "rcv_test"


class FakeEngine:
    def __init__(self) -> None:
        self.settings = SimpleNamespace(api_token=TOKEN, ui_session_ttl=3600.0)

    async def attempts_since(self, after: int, wait: float) -> tuple[int, list[dict[str, Any]]]:
        if after == 2**62:
            return 0, []
        await asyncio.sleep(wait)  # nothing happens
        return after, []

    def own_url(self) -> str:
        return "http://127.0.0.1:1"

    def is_local(self, rid: str) -> bool:
        return True


@pytest.fixture
async def server() -> AsyncIterator[TestServer]:
    app = web.Application()
    app[ENGINE] = FakeEngine()  # type: ignore[assignment]
    setup_ui(app)
    server = TestServer(app)
    await server.start_server()
    yield server
    await server.close()


def cookie() -> dict[str, str]:
    return {"Cookie": f"{COOKIE}={SessionKeys(TOKEN, 3600).issue()}"}


async def test_shutdown_ends_an_open_tail_at_once(server: TestServer) -> None:
    async with ClientSession() as client:
        resp = await client.get(server.make_url("/ui/tail/stream"), headers=cookie())
        assert resp.status == 200 and resp.content_type == "text/event-stream"
        await asyncio.sleep(0.05)  # the stream waits for attempts (15 s between keep-alives)
        await server.app.shutdown()
        # It ends now, not after its keep-alive wait (generous bound: 5 s, well under 15 s).
        assert await asyncio.wait_for(resp.content.read(), 5) == b""
        resp.release()


async def test_a_tail_ends_after_its_lifetime(server: TestServer, monkeypatch: pytest.MonkeyPatch) -> None:
    from web.ui import tools

    monkeypatch.setattr(tools, "TAIL_LIFETIME", 0.2)
    async with ClientSession() as client:
        resp = await client.get(server.make_url("/ui/tail/stream"), headers=cookie())
        assert await asyncio.wait_for(resp.content.read(), 5) in (b"", b": keep-alive\n\n")  # then ends
        assert resp.content.at_eof()


async def test_a_tail_ends_with_its_session(server: TestServer) -> None:
    async with ClientSession() as client:
        short = {"Cookie": f"{COOKIE}={SessionKeys(TOKEN, 2.0).issue()}"}  # 1 to 2 s of it left
        resp = await client.get(server.make_url("/ui/tail/stream"), headers=short)
        assert resp.status == 200
        # It ends when the session does, not after its keep-alive wait or its lifetime.
        assert await asyncio.wait_for(resp.content.read(), 10) in (b"", b": keep-alive\n\n")
        assert resp.content.at_eof()


async def login(client: ClientSession, server: TestServer, token: str,
                headers: dict[str, str] | None = None) -> Any:
    return await client.post(server.make_url("/ui/login"), data={"token": token, "next": "/ui/"},
                             headers=headers or {}, allow_redirects=False)


async def test_the_right_token_logs_in_however_many_wrong_ones_came_first(server: TestServer) -> None:
    async with ClientSession() as client:
        statuses = [(await login(client, server, "wrong")).status for _ in range(6)]
        assert statuses[:3] == [401, 401, 401] and 429 in statuses[3:]  # wrong ones are slowed
        resp = await login(client, server, TOKEN)
        assert resp.status == 303 and COOKIE in resp.cookies
        assert (await login(client, server, "wrong")).status == 401  # a good login cleared the address


async def test_the_cookie_is_secure_behind_a_tls_proxy(server: TestServer) -> None:
    async with ClientSession() as client:
        plain = await login(client, server, TOKEN)
        assert not plain.cookies[COOKIE]["secure"]
        proxied = await login(client, server, TOKEN, {"X-Forwarded-Proto": "https"})
        assert proxied.cookies[COOKIE]["secure"]


@pytest.fixture
async def messages(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[list[tuple[int, int]]]:
    """Receiver `RID` with 1,000 messages, payload JSON 1,000 bytes each; the calls as (after, loop ticks)."""
    calls: list[tuple[int, int]] = []
    ticks = [0]

    def events_view(engine: Any, rid: str, after: int, limit: int) -> dict[str, Any]:
        calls.append((after, ticks[0]))
        seqs = range(after + 1, min(after + limit, 1000) + 1)
        events = [{"seq": s, "id": f"msg_{s}", "type": "t", "timestamp": "", "status": "delivered",
                   "data": {"x": "y" * 992}} for s in seqs]
        return {"events": events, "next_after_seq": seqs[-1] if len(events) == limit and seqs[-1] < 1000
                else None, "retained_seconds": 60}

    async def tick() -> None:
        while True:
            ticks[0] += 1
            await asyncio.sleep(0)

    monkeypatch.setattr(ui_receiver, "events_view", events_view)
    monkeypatch.setattr(ui_receiver, "receiver_here", lambda engine, rid: SimpleNamespace(receiver_id=rid))
    task = asyncio.get_running_loop().create_task(tick())
    yield calls
    task.cancel()


async def test_a_search_stops_at_its_byte_cap_with_a_cursor(
    server: TestServer, messages: list[tuple[int, int]], monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ui_receiver, "SEARCH_BYTES", 120 * 1000)  # 120 payloads of ~1 KB
    async with ClientSession() as client:
        resp = await client.get(server.make_url(f"/ui/receivers/{RID}/events"),
                                params={"q": "absent"}, headers=cookie())
        html = await resp.text()
    assert resp.status == 200
    assert [after for after, _ in messages] == [0, 50, 100]  # not 20 pages
    assert 'id="search-stopped"' in html and "stopped after 120 messages" in html
    assert "after_seq=120&amp;q=absent" in html


async def test_a_long_search_yields_between_pages(
    server: TestServer, messages: list[tuple[int, int]],
) -> None:
    async with ClientSession() as client:
        resp = await client.get(server.make_url(f"/ui/receivers/{RID}/events"),
                                params={"q": "absent"}, headers=cookie())
        html = await resp.text()
    assert resp.status == 200 and len(messages) == 20 and 'id="search-stopped"' not in html
    ticks = [t for _, t in messages]
    assert all(b > a for a, b in itertools.pairwise(ticks))  # other tasks ran between pages


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "1e300", "1.5", "-1", "x", "9" * 400, "1_0", "١٢"])
async def test_a_bad_number_is_a_400_naming_its_field(
    server: TestServer, messages: list[tuple[int, int]], value: str,
) -> None:
    headers = cookie()
    keys = SessionKeys(TOKEN, 3600)
    session = keys.check(headers["Cookie"].split("=", 1)[1])
    assert session is not None
    async with ClientSession() as client:
        page = await client.get(server.make_url(f"/ui/receivers/{RID}/events"),
                                params={"after_seq": value}, headers=headers)
        assert page.status == 400 and "<code>after_seq</code>" in await page.text()
        form = {"csrf": keys.csrf(session), "which": "range", "from_seq": value, "to_seq": "3"}
        posted = await client.post(server.make_url(f"/ui/receivers/{RID}/replay"), data=form,
                                   headers=headers, allow_redirects=False)
        assert posted.status == 400 and "<code>from_seq</code>" in await posted.text()
