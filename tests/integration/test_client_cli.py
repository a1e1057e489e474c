"""The Python client, the Kafka producer helper and the CLI, against a worker on the embedded broker."""

from __future__ import annotations

import asyncio
import inspect
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any, get_args

import orjson
import pytest
from aiohttp import web
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from dispatcher.broker import EmbeddedBroker
from dispatcher.client import (
    OPERATIONS,
    ApiError,
    Concurrency,
    DeliveryControl,
    DispatcherClient,
    DispatcherProducer,
    Ordering,
    Overflow,
)
from dispatcher.domain.events import copy_id
from tests.harness import TOKEN, Delivery, Receiver, WorkerProcess, first_copies, wait_until, wait_until_read
from web.openapi import build


async def test_client_covers_a_receivers_life(worker: WorkerProcess) -> None:
    server = await Receiver().start()
    try:
        async with DispatcherClient(worker.url, TOKEN) as api:
            made = await api.create_receiver(server.url("c"), id="client-r", event_types=["client.*"])
            assert made["id"] == "client-r" and made["secret"].startswith("whsec_")
            changed = await api.patch_receiver("client-r", tenant="acme")
            assert (changed["tenant"], changed["event_types"]) == ("acme", ["client.*"])
            sent = await api.send_message("client-r", "client.direct", {"n": 1}, id="c-1")
            assert sent == {"id": "c-1", "receiver_id": "client-r"}
            await wait_until_status(api, "client-r", "c-1", "delivered")
            published = await api.publish_event("client.made", {"n": 2}, tenant="acme", id="ev-1")
            assert published["receivers"] >= 1
            await wait_until(lambda: len(server.completed) == 2, 30, "message and event copy")
            assert server.completed[1].msg_id == copy_id("ev-1", "client-r", "acme")  # a tenant's event
            listed = await api.list_receivers(tenant="acme", event_type="client.any")
            assert [r["id"] for r in listed["receivers"]] == ["client-r"] and listed["next_cursor"] is None
            found = await api.list_receivers(search="client-r", limit=1000)
            assert "client-r" in [r["id"] for r in found["receivers"]]
            missing = await api.list_receivers(search="no-such-text-anywhere", limit=1000)
            assert missing["receivers"] == []
            state = await api.receiver_state("client-r")
            assert (state["delivered_seq"], state["owner"]) == (2, worker.url)
            with pytest.raises(ApiError) as info:
                await api.send_message("client-r", "bad type!", {})
            assert (info.value.status, info.value.field) == (422, "event_type")
            assert (await api.delete_receiver("client-r"))["deleted"] is True
            with pytest.raises(ApiError) as info:
                await api.get_receiver("client-r")
            assert info.value.status == 404
    finally:
        await server.stop()


async def wait_until_status(api: DispatcherClient, rid: str, msg_id: str, status: str) -> None:
    for _ in range(300):
        try:
            if (await api.message_status(rid, msg_id))["status"] == status:
                return
        except ApiError as exc:
            assert exc.status == 404, exc  # accepted, not yet taken in by its receiver's stream
        await asyncio.sleep(0.1)
    raise AssertionError(f"{msg_id} never {status}")


async def test_producer_writes_what_the_worker_reads(worker: WorkerProcess, broker: EmbeddedBroker) -> None:
    server = await Receiver().start()
    try:
        async with DispatcherClient(worker.url, TOKEN) as api:
            await api.create_receiver(server.url("k"), id="kafka-r", event_types=["kafka.*"])
        servers = broker.url.removeprefix("kafka://")
        async with DispatcherProducer(servers, app_id=worker.app_id) as producer:
            ids = [await producer.send_message("kafka-r", "kafka.direct", {"n": n}) for n in range(3)]
            event_id = await producer.publish_event("kafka.fanned", {"n": 3})
        # A direct producer's bare event: no id (kafka_<partition>_<offset>), no time (the record's).
        raw = AIOKafkaProducer(bootstrap_servers=servers, acks="all")
        await raw.start()
        try:
            record = b'{"event_type": "kafka.bare", "payload": 5}'
            bare = await raw.send_and_wait(f"{worker.app_id}.events", record)
        finally:
            await raw.stop()
        await wait_until(lambda: len(first_copies(server.completed)) == 5, 30, "3 messages and 2 copies")
        got = [d.msg_id for d in first_copies(server.completed)]
        bare_id = copy_id(f"kafka_{bare.partition}_{bare.offset}", "kafka-r")
        assert got[:3] == ids and set(got[3:]) == {copy_id(event_id, "kafka-r"), bare_id}
        assert [d.seq for d in first_copies(server.completed)] == [1, 2, 3, 4, 5]
        sent_at = orjson.loads(next(d for d in server.completed if d.msg_id == bare_id).body)["timestamp"]
        assert sent_at.startswith(time.strftime("%Y-%m-%dT", time.gmtime())), sent_at
    finally:
        await server.stop()


def cli(worker: WorkerProcess, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DISPATCHER_URL": worker.url, "DISPATCHER_API_TOKEN": TOKEN}
    return subprocess.run(
        [sys.executable, "-m", "dispatcher", *args], env=env, capture_output=True, text=True, timeout=60,
        input=stdin,
    )


async def test_cli_creates_sends_publishes_and_replays(worker: WorkerProcess) -> None:
    async def refuse(path: str, delivery: Delivery) -> int:
        return 400 if delivery.seq <= 3 else 200  # the first three are dead-lettered at once

    server = await Receiver(refuse).start()
    try:
        url = server.url("cli")
        create = ["receivers", "create", url, "--id", "cli-r", "--event-type", "cli.*", "--json"]
        run = await asyncio.to_thread(cli, worker, *create)
        assert run.returncode == 0, run.stderr
        made: dict[str, Any] = orjson.loads(run.stdout)
        assert (made["id"], made["event_types"]) == ("cli-r", ["cli.*"])
        for n in range(3):
            payload = orjson.dumps({"n": n}).decode()
            run = await asyncio.to_thread(cli, worker, "send", "cli-r", "cli.x", payload)
            assert run.returncode == 0 and "id: msg_" in run.stdout, run.stderr
        await wait_until(lambda: len(server.completed) == 3, 30, "three refused")
        run = await asyncio.to_thread(cli, worker, "events", "publish", "cli.y", '{"n": 3}', "--id", "cli-ev")
        assert run.returncode == 0 and "receivers: 1" in run.stdout, run.stdout

        async def three_letters() -> str:
            for _ in range(100):
                run = await asyncio.to_thread(cli, worker, "dead-letters", "list", "cli-r")
                if run.stdout.count("permanent_status") == 3:
                    return run.stdout
                await asyncio.sleep(0.2)
            raise AssertionError(run.stdout)

        listing = await three_letters()
        assert listing.splitlines()[0].split()[:3] == ["SEQ", "MSG_ID", "REASON"]
        run = await asyncio.to_thread(cli, worker, "dead-letters", "replay", "cli-r", "--page", "2", "--json")
        assert run.returncode == 0, run.stderr
        assert orjson.loads(run.stdout) == {"receiver_id": "cli-r", "replayed": 3, "skipped": 0, "pages": 2}
        assert "replayed 2 (seq 1..2)" in run.stderr and "replayed 3 (seq 3..3)" in run.stderr
        await wait_until(lambda: len(server.completed) == 7, 30, "the event copy and three replays")

        by_page = ["receivers", "list", "--event-type", "cli.z", "--page", "1"]  # page by page
        run = await asyncio.to_thread(cli, worker, *by_page)
        assert run.returncode == 0, run.stderr
        table = run.stdout.splitlines()
        assert table[0].split()[:3] == ["ID", "STATUS", "BACKLOG"]
        assert [row.split()[0] for row in table[1:]] == ["cli-r"], "only receivers that would get cli.z"
        run = await asyncio.to_thread(cli, worker, "receivers", "list", "--search", "cli-r", "--json")
        assert run.returncode == 0, run.stderr
        assert [r["id"] for r in orjson.loads(run.stdout)["receivers"]] == ["cli-r"]

        run = await asyncio.to_thread(cli, worker, "send", "cli-r", "cli.x", "{not json")
        assert run.returncode == 2 and "argument payload: not JSON" in run.stderr
        run = await asyncio.to_thread(cli, worker, "receivers", "show", "nobody")
        assert run.returncode == 1 and "404 not_found: receiver_id" in run.stderr
    finally:
        await server.stop()


def signed_by(secret: str, delivery: Delivery) -> bool:
    try:
        Webhook(secret).verify(delivery.body, delivery.headers)
    except WebhookVerificationError:
        return False
    return True


async def state_reset_letters(broker: EmbeddedBroker, app_id: str, rid: str, count: int) -> list[str]:
    """Ids of `rid`'s messages on the dead-letter topic with reason state_reset, once `count` are there."""
    servers = broker.url.removeprefix("kafka://")
    topic = f"{app_id}.dead-letters"
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=servers, auto_offset_reset="earliest")
    await consumer.start()
    found: list[str] = []
    try:
        async with asyncio.timeout(30):
            while len(found) < count:
                batch = await consumer.getmany(timeout_ms=500)
                for letter in (orjson.loads(r.value) for records in batch.values() for r in records):
                    if letter["receiver_id"] == rid and letter["reason"] == "state_reset":
                        found.append(letter["msg_id"])
    finally:
        await consumer.stop()
    return found


def messages(rid: str, count: int) -> list[dict[str, Any]]:
    return [{"receiver_id": rid, "event_type": "o.x", "payload": {"n": n}} for n in range(count)]


async def wait_backlog(api: DispatcherClient, rid: str, count: int) -> None:
    await wait_until_read(lambda: api.receiver_state(rid), lambda s: s["backlog"] == count, 15, "backlog")


async def test_client_calls_every_operation(worker: WorkerProcess, broker: EmbeddedBroker) -> None:
    server = await Receiver(echo_challenge=True).start()
    try:
        async with DispatcherClient(worker.url, TOKEN) as api:
            assert await api.health() == {"status": "ok"}
            assert (await api.ready())["status"] == "ready"
            ids = {op["operationId"] for ops in (await api.openapi())["paths"].values()
                   for key, op in ops.items() if key != "parameters"}
            assert ids == set(OPERATIONS)

            made = await api.create_receiver(server.url("ops"), id="ops-r", tenant=None, verify=True)
            assert made["verified"] and made["tenant"] is None
            assert await api.last_response("ops-r") is None, "no attempt yet"
            with pytest.raises(ApiError) as info:
                await api.last_response("nobody")
            assert (info.value.status, info.value.code) == (404, "not_found")

            pinged = await api.ping("ops-r")
            assert (pinged["ok"], pinged["status"]) == (True, 200)
            assert orjson.loads(server.deliveries[-1].body)["type"] == "webhook.ping", "the ping reached it"
            last = await wait_until_read(lambda: api.last_response("ops-r"), bool, 15, "the ping's attempt")
            assert (last["kind"], last["status"]) == ("ping", 200)
            assert (await api.verify("ops-r"))["verification"]["status"] == "passed"
            assert len(server.challenges) == 2, "create and verify each sent a challenge"

            rotated = await api.rotate_secret("ops-r", grace_seconds=600)
            assert rotated["secret"] != made["secret"] and len(rotated["previous_secrets_valid_until"]) == 1
            assert (await api.update_receiver("ops-r", tenant="ops", batch_max=1))["tenant"] == "ops"

            assert (await api.pause("ops-r"))["state"]["paused"] is True
            sent = await api.send_messages(messages("ops-r", 2))
            await wait_backlog(api, "ops-r", 2)
            assert (await api.resume("ops-r"))["state"]["paused"] is False
            await wait_until(lambda: len(server.completed) == 3, 15, "the ping and two messages")
            signed = server.completed[-1]
            assert len(signed.headers["webhook-signature"].split()) == 2, "old and new secret sign"
            assert signed_by(made["secret"], signed) and signed_by(rotated["secret"], signed)

            events = await wait_until_read(
                lambda: api.receiver_events("ops-r"),
                lambda e: [x["status"] for x in e["events"]] == ["delivered"] * 2, 15, "catch-up")
            assert [x["id"] for x in events["events"]] == sent and events["next_after_seq"] is None
            page = await api.receiver_events("ops-r", after_seq=1, limit=1)
            assert [x["seq"] for x in page["events"]] == [2]
            assert [a["seq"] for a in await api.attempts("ops-r", limit=2)] == [2, 1]

            disabled = (await api.disable("ops-r", reason="maintenance"))["state"]
            assert (disabled["status"], disabled["disabled_reason"]) == ("disabled", "maintenance")
            held = await api.send_messages(messages("ops-r", 2))
            await wait_backlog(api, "ops-r", 2)
            reset = await api.reset_receiver_state("ops-r")
            assert (reset["backlog"], reset["next_seq"]) == (0, 5), "the backlog went; seqs carry on"
            assert sorted(await state_reset_letters(broker, worker.app_id, "ops-r", 2)) == sorted(held)
            assert (await api.enable("ops-r"))["state"]["disabled"] is False
            assert len(server.completed) == 3, "what the reset dead-lettered is never delivered"
    finally:
        await server.stop()


async def test_cli_runs_every_command_with_readable_output(worker: WorkerProcess) -> None:
    server = await Receiver(echo_challenge=True).start()

    async def run(*args: str, stdin: str | None = None, status: int = 0) -> str:
        done = await asyncio.to_thread(cli, worker, *args, stdin=stdin)
        assert done.returncode == status, (args, done.stdout, done.stderr)
        return done.stdout if status == 0 else done.stderr

    try:
        health, ready, document = await asyncio.gather(run("health"), run("ready"), run("openapi"))
        assert health == "status: ok\n" and ready.startswith("status: ready\n")
        assert len(orjson.loads(document)["paths"]) > 20

        long = "v" * 300
        create = ["receivers", "create", server.url("cmd"), "--event-type", "cmd.*", "--event-type", "cmd2.x",
                  "--header", f"X-Long={long}", "--verify", "--rate-limit", "50", "--ordering", "strict",
                  "--max-in-flight", "1", "--batch-max", "1", "--set", 'retry={"max_attempts": 3}', "-q"]
        rid = (await run(*create)).strip()
        assert rid.startswith("rcv_"), "-q prints only the id"
        shown = await run("receivers", "show", rid)
        lines = shown.splitlines()
        for line in ("tenant: -", "event_types: cmd.*, cmd2.x", f"  X-Long: {long}", "  max_attempts: 3",
                     "verified: true", "rate_limit: 50.0", "  last_response: -"):
            assert line in lines, (line, shown)
        assert "None" not in shown and "..." not in shown, "no Python None, nothing cut"
        updated = await run("receivers", "update", rid, "--tenant", "acme", "--config", '{"backlog_max": 9}')
        assert {"tenant: acme", "backlog_max: 9"} <= set(updated.splitlines())
        show = ("receivers", "show", rid, "--field")
        tenant, state = await asyncio.gather(run(*show, "tenant"), run(*show, "state"))
        assert tenant == "acme\n" and orjson.loads(state)["backlog"] == 0, "--field: for scripts"
        assert "no field 'state.x'" in await run("receivers", "show", rid, "--field", "state.x", status=1)

        assert await run("receivers", "last-response", rid) == "no attempt yet\n"
        assert {"ok: true", "status: 200"} <= set((await run("receivers", "ping", rid)).splitlines())
        assert orjson.loads(server.deliveries[-1].body)["type"] == "webhook.ping"
        assert "kind: ping" in await run("receivers", "last-response", rid)
        assert "  status: passed" in await run("receivers", "verify", rid)
        rotated = await run("receivers", "rotate-secret", rid, "--grace-seconds", "600")
        secret = next(x for x in rotated.splitlines() if x.startswith("secret: ")).removeprefix("secret: ")

        assert "  status: paused" in await run("receivers", "pause", rid)
        msg_id = (await run("send", rid, "cmd.one", '{"n": 1}', "--id", "cmd-1", "-q")).strip()
        batch = [{"receiver_id": rid, "event_type": "cmd.two", "payload": {"n": n}} for n in (2, 3)]
        ids = (await run("send-batch", "-", "-q", stdin=orjson.dumps(batch).decode())).split()
        assert msg_id == "cmd-1" and len(ids) == 2
        status = await wait_until_text(run, ("messages", "status", rid, "cmd-1"), "status: pending")
        assert "seq: 1" in status.splitlines()
        assert "  status: active" in await run("receivers", "resume", rid)
        await wait_until(lambda: len(server.completed) == 4, 15, "the ping and three messages")
        assert len(server.completed[-1].headers["webhook-signature"].split()) == 2, "both secrets sign"
        assert signed_by(secret, server.completed[-1]), "the rotated-in secret signs"

        events = await wait_until_text(run, ("receivers", "events", rid), "    status: delivered", count=3)
        assert all(i in events for i in ["cmd-1", *ids]) and "    data:\n      n: 1" in events
        page = await run("receivers", "events", rid, "--after-seq", "1", "--limit", "1")
        assert "  - seq: 2" in page and "seq: 3" not in page
        assert "  - number:" in await run("receivers", "attempts", rid, "--limit", "1")
        assert (await run("events", "publish", "cmd.made", "{}", "--id", "cmd-ev", "-q")).strip() == "cmd-ev"

        assert "  disabled_reason: upkeep" in await run("receivers", "disable", rid, "--reason", "upkeep")
        assert "  disabled: false" in await run("receivers", "enable", rid)
        refused = await run("receivers", "reset-state", rid, status=2)
        assert "add --confirm" in refused
        assert "backlog: 0" in (await run("receivers", "reset-state", rid, "--confirm")).splitlines()
        assert "404 not_found: receiver_id" in await run("receivers", "ping", "nobody", status=1)
    finally:
        await server.stop()


async def wait_until_text(run: Any, args: tuple[str, ...], text: str, count: int = 1) -> str:
    """Run a CLI command until its output holds `text` `count` times; its last output."""
    for _ in range(50):
        out: str = await run(*args)
        if out.count(text) >= count:
            return out
        await asyncio.sleep(0.2)
    raise AssertionError(f"{' '.join(args)} never showed {text!r} x{count}: {out}")


async def test_an_id_never_reaches_another_route_or_receiver(worker: WorkerProcess) -> None:
    """`/`, `..` and `%` in an id are one path segment: a 404 or 422, never another receiver's call."""
    server = await Receiver().start()
    try:
        async with DispatcherClient(worker.url, TOKEN) as api:
            await api.create_receiver(server.url("v"), id="victim-r")
            for hostile in ("rcv_x/../victim-r", "x/../../victim-r", "..", "victim-r%2F..%2Fvictim-r"):
                with pytest.raises(ApiError) as info:
                    await api.delete_receiver(hostile)
                assert info.value.status in (404, 422), (hostile, info.value)
            for hostile in ("../../../healthz", "..", ".", "../victim-r"):
                with pytest.raises(ApiError) as info:
                    await api.message_status("victim-r", hostile)
                assert info.value.status in (404, 422), (hostile, info.value)
            assert (await api.get_receiver("victim-r"))["id"] == "victim-r", "the victim is still there"

        deleted = await asyncio.to_thread(cli, worker, "receivers", "delete", "rcv_x/../victim-r")
        assert deleted.returncode == 1 and "deleted" not in deleted.stdout, deleted
        shown = await asyncio.to_thread(cli, worker, "receivers", "show", "../../healthz")
        assert shown.returncode == 1 and "status: ok" not in shown.stdout, shown
        assert shown.stderr.startswith(("error: 404 ", "error: 422 ")), shown.stderr
        still = await asyncio.to_thread(cli, worker, "receivers", "show", "victim-r", "--field", "id")
        assert still.stdout == "victim-r\n", still
    finally:
        await server.stop()


@pytest.fixture(scope="module")
async def patient_worker(make_module_worker: Callable[..., WorkerProcess]) -> WorkerProcess:
    """A worker whose circuits stay closed through a run of failures shorter than its window (64, the
    widest) and its count (1000)."""
    proc = make_module_worker(DISPATCHER_BREAKER_FAILURES="1000", DISPATCHER_BREAKER_WINDOW="64")
    await proc.wait_ready()
    return proc


async def test_replay_never_replays_the_dead_letters_it_makes(patient_worker: WorkerProcess) -> None:
    """The receiver answers 400, so each replay is dead-lettered again at once; the replay stops at the
    dead letters there were when it started (before, it went on replaying its own replays)."""
    worker = patient_worker

    async def refuse(path: str, delivery: Delivery) -> int:
        return 400

    server = await Receiver(refuse).start()
    count = 20
    try:
        async with DispatcherClient(worker.url, TOKEN) as api:
            await api.create_receiver(server.url("again"), id="again-r")
            await api.send_messages([{"receiver_id": "again-r", "event_type": "again.x", "payload": {"n": n}}
                                     for n in range(count)])

            async def letters() -> list[dict[str, Any]]:
                return (await api.dead_letters("again-r", limit=1000))["dead_letters"]

            await wait_until_read(letters, lambda found: len(found) == count, 30, "the first dead letters")
            run = await asyncio.to_thread(cli, worker, "dead-letters", "replay", "again-r", "--page", "1",
                                          "--json")
            assert run.returncode == 0, run.stderr
            assert orjson.loads(run.stdout) == {"receiver_id": "again-r", "replayed": count, "skipped": 0,
                                                "pages": count}, run.stderr
            assert f"replayed {count} (seq {count}..{count})" in run.stderr
            found = await wait_until_read(letters, lambda found: len(found) == 2 * count, 30, "the replays")
            assert [x["seq"] for x in found] == list(range(1, 2 * count + 1))
            replayed = [x["message"]["replay_of"] for x in found[count:]]
            assert replayed == list(range(1, count + 1)), "each original once, no replay of a replay"
            await asyncio.sleep(1)
            assert len(await letters()) == 2 * count, "nothing more was replayed"
    finally:
        await server.stop()


HOSTILE_BODY = "\x1b[2J\x1b[H\x1b[31mFAKE\x1b]0;owned\x07 \u202egnp.exe"


async def test_a_receivers_answer_reaches_the_terminal_escaped(worker: WorkerProcess) -> None:
    async def answer(request: web.Request) -> web.Response:
        return web.Response(status=200, text=HOSTILE_BODY)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        async with DispatcherClient(worker.url, TOKEN) as api:
            await api.create_receiver(f"http://127.0.0.1:{port}/evil", id="evil-r")
        pinged = await asyncio.to_thread(cli, worker, "receivers", "ping", "evil-r")
        assert pinged.returncode == 0, pinged.stderr
        for args in (("receivers", "ping", "evil-r"), ("receivers", "last-response", "evil-r"),
                     ("receivers", "attempts", "evil-r"), ("receivers", "show", "evil-r"),
                     ("receivers", "ping", "evil-r", "--json"),
                     ("receivers", "last-response", "evil-r", "--field", "body_prefix")):
            run = await asyncio.to_thread(cli, worker, *args)
            assert run.returncode == 0, (args, run.stderr)
            assert "FAKE" in run.stdout, (args, run.stdout)
            assert not set(run.stdout) & set("\x1b\x07\u202e"), (args, run.stdout)
    finally:
        await runner.cleanup()


def test_the_client_takes_every_receiver_field_of_the_api_document() -> None:
    """create_receiver and update_receiver name each body field of the API document, typed alike, and
    their Literal types hold the document's choices (the CLI's --ordering, --concurrency and
    --delivery-control take theirs from them)."""
    schemas = build()["components"]["schemas"]
    create = inspect.signature(DispatcherClient.create_receiver).parameters
    update = inspect.signature(DispatcherClient.update_receiver).parameters
    assert set(schemas["ReceiverCreate"]["properties"]) == set(create) - {"self", "extra"}
    assert set(schemas["ReceiverPatch"]["properties"]) == set(update) - {"self", "receiver_id", "extra"}
    for name in schemas["ReceiverPatch"]["properties"]:
        if name != "url":  # required to create, optional to update
            assert create[name].annotation == update[name].annotation, name
    fields = schemas["ReceiverPatch"]["properties"]
    for name, literal in (("ordering", Ordering), ("backlog_overflow", Overflow),
                          ("concurrency", Concurrency), ("delivery_control", DeliveryControl)):
        assert list(get_args(literal)) == fields[name]["enum"], name


async def test_client_sets_concurrency_delivery_control_and_heartbeats(worker: WorkerProcess) -> None:
    server = await Receiver().start()
    try:
        async with DispatcherClient(worker.url, TOKEN) as api:
            made = await api.create_receiver(server.url("steer"), ordering="none", max_in_flight=3,
                                             concurrency="fixed", delivery_control="ignore",
                                             heartbeat_interval=600)
            rid = made["id"]
            chosen = ("concurrency", "delivery_control", "heartbeat_interval")
            assert [made[k] for k in chosen] == ["fixed", "ignore", 600.0]
            state = (await api.get_receiver(rid))["state"]
            assert {k: state["concurrency"][k] for k in ("mode", "window", "ceiling", "cuts")} == {
                "mode": "fixed", "window": 3, "ceiling": 3, "cuts": 0}
            nothing_asked = {"paused_until": None, "max_in_flight": None, "rate": None, "last_at": None,
                             "last": None}
            assert state["delivery_control"] == {"mode": "ignore", **nothing_asked}
            beat = state["heartbeat"]
            assert (beat["interval"], beat["sent"], beat["last_at"]) == (600.0, 0, None)
            assert beat["next_at"] > time.time() + 500, "due an interval after it became active"

            changed = await api.update_receiver(rid, concurrency="adaptive", delivery_control="obey",
                                                heartbeat_interval=None)
            assert [changed[k] for k in chosen] == ["adaptive", "obey", 0.0], "null: no heartbeats"
            state = (await api.receiver_state(rid))
            assert (state["concurrency"]["mode"], state["heartbeat"]) == ("adaptive", None)
            assert state["delivery_control"]["mode"] == "obey"
            await api.update_receiver(rid, ordering="strict")
            state = (await api.get_receiver(rid))["state"]
            assert state["concurrency"] is None, "ordered: one at a time, no window"
            with pytest.raises(ApiError) as info:
                await api.update_receiver(rid, concurrency="sometimes")  # type: ignore[arg-type]
            assert (info.value.status, info.value.field) == (422, "concurrency")
            with pytest.raises(ApiError) as info:
                await api.update_receiver(rid, heartbeat_interval=0.5)
            assert (info.value.status, info.value.field) == (422, "heartbeat_interval")
    finally:
        await server.stop()


STEER = "pause=60, max-in-flight=2, rate=50, bogus=1"


async def test_cli_sets_the_options_and_shows_what_the_receiver_asked(worker: WorkerProcess) -> None:
    async def steer(path: str, delivery: Delivery) -> int | tuple[int, dict[str, str]]:
        return (200, {"Webhook-Delivery-Control": STEER}) if delivery.seq == 1 else 200

    server = await Receiver(steer).start()

    async def run(*args: str, status: int = 0) -> str:
        done = await asyncio.to_thread(cli, worker, *args)
        assert done.returncode == status, (args, done.stdout, done.stderr)
        return done.stdout if status == 0 else done.stderr

    def heartbeats() -> list[Delivery]:
        return [d for d in server.completed if d.headers.get("webhook-event-type") == "webhook.heartbeat"]

    try:
        create = ["receivers", "create", server.url("cli-steer"), "--ordering", "none", "--max-in-flight",
                  "4", "--concurrency", "fixed", "--delivery-control", "ignore", "--heartbeat-interval", "1",
                  "--json"]
        made = orjson.loads(await run(*create))
        rid = made["id"]
        chosen = (made["concurrency"], made["delivery_control"], made["heartbeat_interval"])
        assert chosen == ("fixed", "ignore", 1.0)
        await wait_until(lambda: len(heartbeats()) >= 1, 30, "a heartbeat to the idle receiver")
        assert orjson.loads(heartbeats()[0].body)["data"]["last_seq"] == 0
        updated = set((await run("receivers", "update", rid, "--concurrency", "adaptive",
                                 "--delivery-control", "obey")).splitlines())
        assert {"concurrency: adaptive", "delivery_control: obey", "heartbeat_interval: 1.0"} <= updated
        refused = await run("receivers", "update", rid, "--concurrency", "sometimes", status=2)
        assert "invalid choice" in refused

        await run("send", rid, "steer.x", '{"n": 1}')
        asked = ("receivers", "show", rid, "--field", "state.delivery_control.last")
        await wait_until_text(run, asked, "pause")
        shown = await run("receivers", "show", rid)
        lines = shown.splitlines()
        state = lines[lines.index("state:"):]
        for line in ("  concurrency:", "    mode: adaptive", "    ceiling: 4", "    cuts: 0",
                     "  delivery_control:", "    mode: obey", "    max_in_flight: 2", "    rate: 50.0",
                     "  heartbeat:", "    interval: 1.0"):
            assert line in state, (line, shown)
        window = next(x for x in state if x.startswith("    window: "))
        assert int(window.removeprefix("    window: ")) in (1, 2), "at most the 2 the receiver asked for"
        paused = next(x for x in state if x.startswith("    paused_until: "))
        assert paused.endswith(" UTC)"), "a time, also in UTC"
        last = next(x for x in state if x.startswith("    last: "))
        assert all(part in last for part in ("unknown directive 'bogus' skipped", "pause 60s",
                                             "max-in-flight 2", "rate 50/s")), last
        sent = next(x for x in state if x.startswith("    sent: "))
        assert int(sent.removeprefix("    sent: ")) >= 1
        logged = (await run("receivers", "attempts", rid)).splitlines()
        assert f"    control: webhook-delivery-control: {last.removeprefix('    last: ')}" in logged
        assert "    kind: heartbeat" in logged

        off = await run("receivers", "update", rid, "--heartbeat-interval", "0", "--delivery-control",
                        "ignore")
        assert {"heartbeat_interval: 0.0", "delivery_control: ignore"} <= set(off.splitlines())
        state = (await run("receivers", "show", rid)).split("\nstate:\n", 1)[1].splitlines()
        assert {"  heartbeat: -", "    mode: ignore"} <= set(state)
    finally:
        await server.stop()
