"""Tenant tokens on two workers and the embedded broker: mint, use, scoping on every /v1 route, revoke.

A token minted on one worker works at once on the other; a tenant token reaches only its tenant's
receivers through any route of the OpenAPI document (another tenant's receiver is 404, exactly as an
unknown one), on the receiver's owner and on the worker that forwards to it; a revoked token is
refused by the worker that revoked it as soon as the call answers, and by the other once the record
arrives; the listing never shows a secret or its hash; the logs name the token, never its secret.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import orjson

from dispatcher.partitioning import partitioner
from dispatcher.settings import Settings
from tests.harness import TOKEN, Api, Receiver, WorkerProcess, wait_until
from tests.integration.test_owner_routing import two_workers
from web.openapi import build

PER_TENANT = 6  # receivers each, half of them on each worker's partitions


def spread(prefix: str, parts: list[set[int]]) -> list[str]:
    """Receiver ids `prefix-N`, PER_TENANT / 2 of them owned by each worker."""
    partition_of = partitioner(Settings().partitions)
    ids: list[str] = []
    for owned in parts:
        candidates = (f"{prefix}-{n}" for n in range(1000))
        ids += [rid for rid in candidates if partition_of(rid) in owned][: PER_TENANT // 2]
    return ids


def v1_operations() -> set[tuple[str, str]]:
    return {(path, method.upper()) for path, ops in build()["paths"].items() if path.startswith("/v1")
            for method in ops if method != "parameters"}


def concrete(path: str, receiver_id: str) -> str:
    return path.replace("{receiver_id}", receiver_id).replace("{message_id}", "m-probe").replace(
        "{token_id}", "01JD0000000000000000000000")


BODIES: dict[tuple[str, str], Any] = {  # bodies that would be taken for a visible receiver
    ("/v1/receivers/{receiver_id}", "PATCH"): {"url": "http://127.0.0.1:9/patched"},
    ("/v1/receivers/{receiver_id}/recover", "POST"): {"since": 0},
    ("/v1/receivers/{receiver_id}/replay", "POST"): {},
    ("/v1/receivers/{receiver_id}/secrets/rotate", "POST"): {},
    ("/v1/receivers/{receiver_id}/transform/test", "POST"): {"payload": {"n": 1}},
}


async def test_tenant_tokens_mint_use_scope_and_revoke(make_worker: Callable[..., WorkerProcess]) -> None:
    workers, parts = await two_workers(make_worker)
    admin = [Api(w.url) for w in workers]
    server = await Receiver().start()
    opened: list[Api] = []
    opened_sessions: list[aiohttp.ClientSession] = []
    try:
        acme_token, acme_id = await mint(admin[0], "acme")
        globex_token, _ = await mint(admin[0], "globex")
        acme = [Api(w.url, acme_token) for w in workers]
        globex = [Api(w.url, globex_token) for w in workers]
        opened += acme + globex

        # minted on worker 0, taken at once by worker 1: its receivers get its tenant
        mine = [await created(acme[(i + 1) % 2], server.url(f"a{i}"), rid)
                for i, rid in enumerate(spread("acme", parts))]
        theirs = [await created(globex[i % 2], server.url(f"g{i}"), rid)
                  for i, rid in enumerate(spread("globex", parts))]
        await created(admin[0], server.url("u"), "untenanted")
        assert {r["tenant"] for r in mine} == {"acme"} and {r["tenant"] for r in theirs} == {"globex"}
        await listing_shows_no_secret(admin[1], [acme_token, globex_token])

        await every_route_hides_other_tenants(acme, [r["id"] for r in theirs] + ["untenanted"])
        await calls_without_a_receiver_are_scoped(acme, admin[0], mine[0]["id"], theirs[0]["id"])
        await events_and_messages_reach_the_tenant_only(acme, globex, mine, theirs, server)
        console = aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))
        opened_sessions.append(console)
        await console_shows_the_tenant_only(console, workers[1].url, acme_token, mine, theirs)

        # revoke on worker 0: refused there as soon as it answers, on worker 1 once the record arrives
        status, revoked = await admin[0].call("DELETE", f"/v1/tokens/{acme_id}")
        assert (status, revoked["status"]) == (200, "revoked") and revoked["revoked_at"], revoked
        status, refused = await acme[0].call("GET", "/v1/receivers")
        assert (status, refused["error"]["message"]) == (401, "this token is revoked"), refused
        started = time.monotonic()
        while (await acme[1].call("GET", "/v1/receivers"))[0] != 401:
            assert time.monotonic() - started < 10, "worker 1 never read the revocation"
            await asyncio.sleep(0.05)
        assert (await globex[1].call("GET", "/v1/receivers"))[0] == 200, "other tokens go on working"
        again = await admin[1].call("DELETE", f"/v1/tokens/{acme_id}")
        assert again == (200, revoked), "revoking again changes nothing"
        assert (await admin[1].call("DELETE", "/v1/tokens/01JD0000000000000000000000"))[0] == 404
        # the console's session opened with it ends; logging in with it again fails
        async with console.get(workers[1].url + "/ui/receivers", allow_redirects=False) as resp:
            assert resp.status == 303 and resp.headers["Location"].startswith("/ui/login")
        async with console.post(workers[1].url + "/ui/login", data={"token": acme_token}) as resp:
            assert resp.status == 401
    finally:
        for api in admin + opened:
            await api.close()
        for session in opened_sessions:
            await session.close()
        await server.stop()
    logs = "".join(w.log_path.read_text(errors="replace") for w in workers)
    for token in (acme_token, globex_token):
        assert token.split("_", 2)[2] not in logs, "a token's secret in a log"
    assert re.search(rf"refused GET /v1/receivers: token_id={acme_id} tenant=acme: revoked", logs)
    assert re.search(rf"token_id={acme_id} tenant=acme asked for receiver_id=globex-\d", logs)


async def mint(admin: Api, tenant: str) -> tuple[str, str]:
    status, answer = await admin.call("POST", "/v1/tokens", {"tenant": tenant, "name": f"{tenant}'s CI"})
    assert status == 201, answer
    assert answer["token"].startswith(f"wdt_{answer['id']}_") and answer["status"] == "active"
    assert answer["token"].endswith(answer["last4"])
    return answer["token"], answer["id"]


async def created(api: Api, url: str, rid: str) -> dict[str, Any]:
    body = {"url": url, "id": rid, "event_types": ["order.*"]}
    status, answer = await api.call("POST", "/v1/receivers", body)
    assert status == 201, answer
    return answer


async def listing_shows_no_secret(admin: Api, tokens: list[str]) -> None:
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {TOKEN}"}) as session, \
            session.get(admin.base_url + "/v1/tokens") as resp:
        raw = await resp.read()
    assert resp.status == 200
    listed = orjson.loads(raw)["tokens"]
    assert [t["tenant"] for t in listed] == ["acme", "globex"]
    assert all("token" not in t and "secret_hash" not in t for t in listed)
    for token in tokens:
        secret = token.split("_", 2)[2]
        assert secret.encode() not in raw and hashlib.sha256(secret.encode()).hexdigest().encode() not in raw


async def every_route_hides_other_tenants(acme: list[Api], others: list[str]) -> None:
    """Every operation of the document with a receiver in its path, on both workers (owner and not):
    another tenant's receiver (and an untenanted one) answers as an unknown id does."""
    routes = sorted((p, m) for p, m in v1_operations() if "{receiver_id}" in p)
    assert len(routes) == 21, routes
    for path, method in routes:
        for api in acme:
            for rid in others:
                status, answer = await api.call(method, concrete(path, rid), BODIES.get((path, method)))
                expected = {"code": "not_found", "field": "receiver_id", "message": f"no receiver {rid!r}"}
                assert (status, answer["error"]) == (404, expected), (method, path, rid, api.base_url)
            status, unknown = await api.call(method, concrete(path, "nobody"), BODIES.get((path, method)))
            assert status == 404 and unknown["error"]["message"] == "no receiver 'nobody'", (method, path)


async def calls_without_a_receiver_are_scoped(acme: list[Api], admin: Api, own: str, other: str) -> None:
    tenant_routes = {(p, m) for p, m in v1_operations() if "{receiver_id}" not in p}
    seen: set[tuple[str, str]] = set()

    def called(path: str, method: str) -> None:
        seen.add((path, method))

    for api in acme:
        status, page = await api.call("GET", "/v1/receivers?limit=1000")
        assert status == 200 and {r["tenant"] for r in page["receivers"]} == {"acme"}, page
        assert len(page["receivers"]) == PER_TENANT
        status, refused = await api.call("GET", "/v1/receivers?tenant=globex")
        assert (status, refused["error"]["field"]) == (403, "tenant")
        called("/v1/receivers", "GET")

        other_tenant = {"url": "http://127.0.0.1:9/x", "tenant": "globex"}
        status, refused = await api.call("POST", "/v1/receivers", other_tenant)
        assert (status, refused["error"]["code"], refused["error"]["field"]) == (403, "forbidden", "tenant")
        status, taken = await api.call("POST", "/v1/receivers", {"url": "http://127.0.0.1:9/x", "id": other})
        assert (status, taken["error"]["field"]) == (409, "id"), "another tenant's receiver is not replaced"
        called("/v1/receivers", "POST")
        for change in ({"tenant": "globex"}, {"tenant": None}):
            status, refused = await api.call("PATCH", f"/v1/receivers/{own}", change)
            assert (status, refused["error"]["field"]) == (403, "tenant"), change

        message = {"event_type": "order.x", "payload": {}}
        status, refused = await api.call("POST", "/v1/messages", {**message, "receiver_id": other})
        assert (status, refused["error"]["field"]) == (404, "receiver_id"), refused
        called("/v1/messages", "POST")
        batch = {"messages": [{**message, "receiver_id": own}, {**message, "receiver_id": other}]}
        status, refused = await api.call("POST", "/v1/messages/batch", batch)
        assert (status, refused["error"]["field"]) == (404, "messages[1].receiver_id"), refused
        called("/v1/messages/batch", "POST")
        status, refused = await api.call("POST", "/v1/events", {**message, "tenant": "globex"})
        assert (status, refused["error"]["field"]) == (403, "tenant")
        called("/v1/events", "POST")

        for method, path, body in (("GET", "/v1/tokens", None), ("POST", "/v1/tokens", {"tenant": "acme"}),
                                   ("DELETE", "/v1/tokens/01JD0000000000000000000000", None)):
            status, refused = await api.call(method, path, body)
            assert (status, refused["error"]["code"], refused["error"]["field"]) == (
                403, "forbidden", "Authorization"), (method, path)
            called(re.sub(r"/01JD\w+$", "/{token_id}", path), method)
    assert seen == tenant_routes, tenant_routes - seen
    assert (await admin.call("GET", "/v1/receivers?tenant=globex"))[0] == 200


async def events_and_messages_reach_the_tenant_only(
    acme: list[Api], globex: list[Api], mine: list[dict[str, Any]], theirs: list[dict[str, Any]],
    server: Receiver,
) -> None:
    status, event = await acme[1].call("POST", "/v1/events", {"event_type": "order.shipped", "payload": {}})
    assert (status, event["receivers"]) == (202, PER_TENANT), "the tenant's own receivers, counted"
    status, _ = await acme[0].call("POST", "/v1/messages", {
        "receiver_id": mine[0]["id"], "event_type": "order.direct", "payload": {}, "id": "direct-1"})
    assert status == 202
    status, _ = await globex[0].call("POST", "/v1/events", {"event_type": "order.other", "payload": {}})
    assert status == 202
    # every receiver subscribes to order.*: acme's get 2 (the event and one the direct message),
    # globex's 1, the untenanted one both events
    await wait_until(lambda: len(server.completed) == 2 * PER_TENANT + 1 + 2, 60, "every delivery")
    await asyncio.sleep(0.5)  # nothing more comes
    got = {(d.path, d.headers["webhook-event-type"]) for d in server.deliveries}
    assert {p for p, t in got if t == "order.shipped"} == {f"a{i}" for i in range(PER_TENANT)} | {"u"}
    assert {p for p, t in got if t == "order.other"} == {f"g{i}" for i in range(PER_TENANT)} | {"u"}
    assert {p for p, t in got if t == "order.direct"} == {"a0"}


async def console_shows_the_tenant_only(
    session: aiohttp.ClientSession, url: str, token: str, mine: list[dict[str, Any]],
    theirs: list[dict[str, Any]],
) -> None:
    async with session.post(url + "/ui/login", data={"token": token, "next": "/ui/receivers"}) as resp:
        assert resp.status == 200 and resp.url.path == "/ui/receivers"
        page = await resp.text()
    assert all(r["id"] in page for r in mine) and not any(r["id"] in page for r in theirs), page
    assert "tenant acme" in page
    async with session.get(url + "/ui/receivers?tenant=globex") as resp:  # the form cannot widen it
        page = await resp.text()
    assert all(r["id"] in page for r in mine) and not any(r["id"] in page for r in theirs)
    for other in (theirs[0]["id"], theirs[-1]["id"]):  # one owned by each worker
        async with session.get(f"{url}/ui/receivers/{other}") as resp:
            assert resp.status == 404
    async with session.get(f"{url}/ui/receivers/{mine[0]['id']}") as resp:
        assert resp.status == 200
    async with session.get(url + "/ui/", allow_redirects=False) as resp:
        assert (resp.status, resp.headers["Location"]) == (303, "/ui/receivers"), "no cluster overview"


async def test_a_console_tail_ends_when_its_tenant_token_is_revoked(worker: WorkerProcess, api: Api) -> None:
    """An open live tail is a page that goes on: a session whose token is revoked must see nothing
    more from it, as its next page would send it to the login."""
    server = await Receiver().start()
    token, token_id = await mint(api, "tailco")
    tenant = Api(worker.url, token)
    console = aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))
    try:
        rid = (await created(tenant, server.url("t"), "tailco-r"))["id"]
        async with console.post(worker.url + "/ui/login", data={"token": token, "next": "/ui/tail"}) as resp:
            assert resp.status == 200
        async with console.get(worker.url + "/ui/tail/stream") as stream:
            assert stream.content_type == "text/event-stream"
            await tenant.send_batch([message(rid, "before")])
            seen = b""
            for _ in range(100):  # the attempt's line, after keep-alives perhaps
                seen += await asyncio.wait_for(stream.content.readline(), 30)
                if b'"msg_id":"before"' in seen:
                    break
            assert b'"msg_id":"before"' in seen, seen

            status, _ = await api.call("DELETE", f"/v1/tokens/{token_id}")
            assert status == 200
            await api.send_batch([message(rid, "after")])
            await wait_until(lambda: len(server.completed) == 2, 30, "the second delivery")
            rest = await asyncio.wait_for(stream.content.read(), 30)  # the stream ends
            assert b'"msg_id":"after"' not in rest, rest
    finally:
        await tenant.close()
        await console.close()
        await server.stop()


def message(rid: str, msg_id: str) -> dict[str, Any]:
    return {"receiver_id": rid, "event_type": "order.tail", "payload": {}, "id": msg_id}


async def test_made_up_token_ids_neither_flood_nor_forge_the_log(worker: WorkerProcess) -> None:
    """Anyone can send a well-formed token id: the refusals are logged a line per 10 s at most, and a
    path with a newline in it cannot start a line of its caller's making."""
    forged = "[2026-11-29 12:00:00,000] [1] [INFO] receiver_id=rcv_payroll delivered msg_id=FORGED"
    path = "/v1/receivers/x%0A" + forged.replace(" ", "%20").replace("[", "%5B").replace("]", "%5D")
    tokens = [f"wdt_01JD{n:022d}_" + "s" * 43 for n in range(20)]

    async def call(http: aiohttp.ClientSession, token: str) -> int:
        async with http.get(worker.url + path, headers={"Authorization": f"Bearer {token}"}) as resp:
            return resp.status

    async with aiohttp.ClientSession() as http:
        assert await asyncio.gather(*(call(http, t) for t in tokens)) == [401] * len(tokens)
    lines = worker.log_path.read_text(errors="replace").splitlines()
    refused = [line for line in lines if "unknown token id" in line and "01JD0000" in line]
    assert 1 <= len(refused) < len(tokens), refused
    assert "more calls with unknown token ids in the last 10 s not logged" in refused[0]
    assert not [line for line in lines if line.startswith("[2026-11-29 12:00:00,000]")], "a forged line"
    assert any("/v1/receivers/x\\x0a[2026-11-29" in line for line in refused), refused
