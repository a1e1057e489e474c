"""Receivers' transforms on a real worker and broker: shaped, signed, cancelled, dead-lettered, replayed."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web
from standardwebhooks import Webhook

from dispatcher.client import ApiError, DispatcherClient
from tests.harness import TOKEN, Receiver, WorkerProcess

pytestmark = pytest.mark.integration

SHAPE = {
    "$if": "'skip' in payload",
    "then": {"cancel": True},
    "else": {
        "body": {"text": "${event_type}: ${payload.name}", "seq": {"$eval": "message.seq"}},
        "headers": {"X-Shape": "chat", "X-Tenant": "${receiver.tenant}"},
        "path": "/orders/${payload.id}?src=wd",
    },
}


async def status_of(api: DispatcherClient, rid: str, msg_id: str, want: str) -> dict[str, Any]:
    """The message's status answer once it reads `want` (bounded wait)."""
    answer: dict[str, Any] = {}
    for _ in range(600):
        try:
            answer = await api.message_status(rid, msg_id)
        except ApiError as exc:
            assert exc.status == 404, exc  # accepted, not taken in yet
        if answer.get("status") == want:
            return answer
        await asyncio.sleep(0.05)
    raise AssertionError(f"{msg_id} never read {want}: {answer}")


async def test_a_transform_shapes_signs_cancels_dead_letters_and_replays(worker: WorkerProcess) -> None:
    async with Receiver() as server, DispatcherClient(worker.url, TOKEN) as api:
        made = await api.create_receiver(server.url("tx"), tenant="acme", transform=SHAPE)
        rid, secret = made["id"], made["secret"]
        assert made["transform"] == SHAPE
        for msg_id, payload in (("tx-1", {"id": 1, "name": "a"}), ("tx-2", {"skip": 1}),
                                ("tx-3", {"id": 3, "name": "c"})):
            await api.send_message(rid, "order.created", payload, id=msg_id)
        await status_of(api, rid, "tx-3", "delivered")
        assert (await status_of(api, rid, "tx-2", "cancelled"))["seq"] == 2
        got = server.completed
        assert [(d.path, d.msg_id, d.seq) for d in got] == [
            ("tx/orders/1", "tx-1", 1), ("tx/orders/3", "tx-3", 3),
        ], "the cancelled seq 2 never went; the next kept its own seq"
        for d in got:
            assert Webhook(secret).verify(d.body, d.headers) == orjson.loads(d.body), "signed as sent"
            assert (d.headers["x-shape"], d.headers["x-tenant"]) == ("chat", "acme")
        assert orjson.loads(got[0].body) == {"text": "order.created: a", "seq": 1}
        caught_up = (await api.receiver_events(rid))["events"]
        assert [(e["seq"], e["status"]) for e in caught_up] == [
            (1, "delivered"), (2, "cancelled"), (3, "delivered")]

        # A template that fails: dead-lettered at once, the message kept; fixed, a replay delivers it.
        await api.update_receiver(rid, transform={"body": {"$eval": "payload.nested.deeper"}})
        await api.send_message(rid, "order.created", {"id": 4, "name": "d"}, id="tx-4")
        letter = await status_of(api, rid, "tx-4", "dead_lettered")
        assert letter["reason"] == "transform_error" and "nested" in letter["detail"]
        kept = (await api.dead_letters(rid))["dead_letters"]
        assert [(x["seq"], x["reason"], x["message"]["data"]) for x in kept] == [
            (4, "transform_error", {"id": 4, "name": "d"}),
        ]
        await api.update_receiver(rid, transform=SHAPE)
        replayed = (await api.replay(rid))["messages"]
        again = await status_of(api, rid, replayed[0]["id"], "delivered")
        assert again["seq"] == 5
        last = server.completed[-1]
        assert (last.path, last.headers["webhook-replay-of"]) == ("tx/orders/4", "4")
        assert Webhook(secret).verify(last.body, last.headers)["text"] == "order.created: d"

        # The preview: the saved template, or one given; errors name the part.
        tried = await api.transform_test(rid, {"id": 9, "name": "z"}, event_type="order.paid")
        assert tried == {"cancel": False, "body": {"text": "order.paid: z", "seq": 0},
                         "headers": {"X-Shape": "chat", "X-Tenant": "acme"}, "path": "/orders/9?src=wd",
                         "url": server.url("tx/orders/9?src=wd")}
        with pytest.raises(ApiError) as caught:
            await api.transform_test(rid, {}, transform={"path": "//evil.example/x"})
        assert (caught.value.status, caught.value.code, caught.value.field) == (
            422, "transform_error", "transform.path")
        async with aiohttp.ClientSession() as http, http.get(worker.url + "/metrics") as resp:
            metrics = await resp.text()
        assert 'webhook_dispatcher_transforms_total{outcome="cancelled"} 1.0' in metrics
        assert 'webhook_dispatcher_transforms_total{outcome="error"} 1.0' in metrics


async def test_a_heavy_template_is_delivered_and_a_hostile_one_dead_lettered(worker: WorkerProcess) -> None:
    heavy = {"body": {"$map": {"$eval": "payload"}, "each(x)": {"$eval": "x * 2"}}}
    hostile = {"body": {"$map": {"$eval": "range(0, 1000)"}, "each(x)": {
        "$map": {"$eval": "range(0, 1000)"}, "each(y)": {"$eval": "x + y"}}}}
    async with Receiver() as server, DispatcherClient(worker.url, TOKEN) as api:
        rid = (await api.create_receiver(server.url("heavy"), transform=heavy))["id"]
        await api.send_message(rid, "t.heavy", list(range(3000)), id="hv-1")
        await status_of(api, rid, "hv-1", "delivered")
        assert orjson.loads(server.completed[-1].body) == [2 * x for x in range(3000)]
        other = (await api.create_receiver(server.url("hostile"), transform=hostile))["id"]
        await api.send_message(other, "t.hostile", {}, id="hs-1")
        letter = await status_of(api, other, "hs-1", "dead_lettered")
        assert letter["reason"] == "transform_error" and "budget of steps" in letter["detail"]
        assert server.by_path("hostile") == []
        # The preview takes the same way: heavy runs go to a thread, hostile ones are refused.
        tried = await api.transform_test(rid, list(range(3000)))
        assert tried["body"] == [2 * x for x in range(3000)]
        with pytest.raises(ApiError) as caught:
            await api.transform_test(other, {})
        assert caught.value.code == "transform_error" and "budget of steps" in caught.value.message


async def test_a_bad_template_or_batching_is_refused_at_create(worker: WorkerProcess) -> None:
    async with DispatcherClient(worker.url, TOKEN) as api:
        for extra, field in (({"transform": {"body": {"$eval": "1 +"}}}, "transform.body.$eval"),
                             ({"transform": {"body": 1}, "batch_max": 5}, "transform")):
            with pytest.raises(ApiError) as caught:
                await api.create_receiver("http://127.0.0.1:9/x", **extra)
            assert (caught.value.status, caught.value.field) == (422, field)


def test_the_cli_tries_a_template(worker: WorkerProcess) -> None:
    env = {**os.environ, "DISPATCHER_URL": worker.url, "DISPATCHER_API_TOKEN": TOKEN}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "dispatcher", *args], env=env, capture_output=True,
                              text=True, timeout=60)

    made = cli("receivers", "create", "http://127.0.0.1:9/cli", "--json", "--transform", '{"body": 1}')
    assert made.returncode == 0, made.stderr
    rid = orjson.loads(made.stdout)["id"]
    tried = cli("receivers", "transform-test", rid, "--json", "--payload", '{"n": 2}',
                "--transform", '{"body": {"$eval": "payload.n * 21"}}')
    assert tried.returncode == 0, tried.stderr
    assert orjson.loads(tried.stdout)["body"] == 42


async def test_a_preview_names_the_url_delivery_dials(worker: WorkerProcess) -> None:
    """A path with characters the client re-encodes (a stray `%`, an encoded unreserved one)."""
    targets: list[str] = []

    async def record(request: web.Request) -> web.Response:
        targets.append(request.raw_path)  # the request target as it came, not decoded
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_route("POST", "/{tail:.*}", record)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    base = f"http://127.0.0.1:{port}"
    try:
        async with DispatcherClient(worker.url, TOKEN) as api:
            rid = (await api.create_receiver(f"{base}/in", transform={"path": "${payload.p}"}))["id"]
            payload = {"p": "/a/%zz/%41%7e?q=%zz&r=~"}
            preview = await api.transform_test(rid, payload)
            await api.send_message(rid, "t.path", payload, id="path-1")
            await status_of(api, rid, "path-1", "delivered")
        assert targets == ["/in/a/%25zz/A~?q=%25zz&r=~"]
        assert preview["url"] == base + targets[0]
        assert preview["path"] == payload["p"], "the transform's own suffix, as it gave it"
    finally:
        await runner.cleanup()


async def test_a_payload_that_fails_a_transform_cannot_forge_a_log_line(worker: WorkerProcess) -> None:
    """The transform's error quotes the payload; the log lines that carry it keep it on one line."""
    forged = "[2026-11-29 12:00:00,000] [1] [INFO] receiver_id=rcv_payroll delivered msg_id=FORGED"
    async with DispatcherClient(worker.url, TOKEN) as api:
        rid = (await api.create_receiver("http://127.0.0.1:9/never",
                                         transform={"body": {"$eval": "fromNow(payload.x)"}}))["id"]
        await api.send_message(rid, "t.forge", {"x": f"soon\n{forged} reason=planted\u2028"}, id="forge-1")
        letter = await status_of(api, rid, "forge-1", "dead_lettered")
    assert letter["reason"] == "transform_error" and forged in letter["detail"], "the letter keeps it whole"
    lines = worker.log_path.read_text(errors="replace").splitlines()
    assert not [line for line in lines if line.startswith("[2026-11-29 12:00:00,000]")], "a forged line"
    mine = [line for line in lines if "msg_id=forge-1" in line]
    assert any("transform failed" in line for line in mine) and any("dead-lettered" in line for line in mine)
    assert all("reason=planted" not in line and "\u2028" not in line for line in mine), mine
