"""Resend a delivered message and recover dead letters by time, through the client and the CLI."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime

import orjson
import pytest
from standardwebhooks import Webhook

from dispatcher.broker import EmbeddedBroker
from dispatcher.client import ApiError, DispatcherClient
from tests.harness import TOKEN, Delivery, Receiver, WorkerProcess, wait_until
from tests.integration.test_retries import produce_big

pytestmark = pytest.mark.integration


async def wait_delivered(api: DispatcherClient, rid: str, msg_id: str) -> None:
    async def status() -> str:
        try:
            return str((await api.message_status(rid, msg_id))["status"])
        except ApiError as exc:
            assert exc.status == 404, exc  # accepted, not yet taken in by the receiver's stream
            return "unknown"

    for _ in range(600):
        if await status() == "delivered":
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{msg_id} never delivered")


def cli(worker: WorkerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DISPATCHER_URL": worker.url, "DISPATCHER_API_TOKEN": TOKEN}
    return subprocess.run([sys.executable, "-m", "dispatcher", *args], env=env, capture_output=True,
                          text=True, timeout=60)


async def test_resend_sends_a_delivered_message_again_at_the_next_seq(worker: WorkerProcess) -> None:
    server = await Receiver().start()
    try:
        async with DispatcherClient(worker.url, TOKEN) as api:
            made = await api.create_receiver(server.url("resend"))
            rid = made["id"]
            await api.send_message(rid, "t.resend", {"n": 1}, id="rs-1")
            await wait_delivered(api, rid, "rs-1")
            again = await api.resend(rid, "rs-1")
            assert again["resend_of"] == {"id": "rs-1", "seq": 1} and again["id"] != "rs-1"
            for _ in range(2):  # a retried call with the same new id is taken once
                await api.resend(rid, "rs-1", id="rs-1-again")
            await api.send_message(rid, "t.resend", {"n": 2}, id="rs-2")
            await wait_delivered(api, rid, "rs-2")
            got = [d for d in server.completed if d.headers.get("webhook-event-type") == "t.resend"]
            assert [(d.seq, d.msg_id, d.headers.get("webhook-replay-of")) for d in got] == [
                (1, "rs-1", None), (2, again["id"], "1"), (3, "rs-1-again", "1"), (4, "rs-2", None),
            ]
            assert Webhook(made["secret"]).verify(got[1].body, got[1].headers)["data"] == {"n": 1}
            # The copy's id must be new, or a copy's of that seq: another message's would make it that
            # message's duplicate, answered 202 and never sent.
            for original, taken in (("rs-1", "rs-1"), ("rs-1", "rs-2"), ("rs-2", again["id"])):
                with pytest.raises(ApiError) as info:
                    await api.resend(rid, original, id=taken)
                refused = (info.value.status, info.value.code, info.value.field)
                assert refused == (409, "conflict", "id"), taken
            assert (await api.resend(rid, "rs-1", id="rs-1-again"))["id"] == "rs-1-again"  # a retried call
            await api.send_message(rid, "t.resend", {"n": 3}, id="rs-3")  # accepted, perhaps not applied yet
            with pytest.raises(ApiError) as info:
                await api.resend(rid, "rs-1", id="rs-3")
            assert (info.value.status, info.value.code, info.value.field) == (409, "conflict", "id")
            unknown = (("nobody", "rs-1", "receiver_id"), (rid, "rs-none", "message_id"))
            for receiver_id, msg_id, field in unknown:
                with pytest.raises(ApiError) as info:
                    await api.resend(receiver_id, msg_id)
                assert (info.value.status, info.value.code, info.value.field) == (404, "not_found", field)
    finally:
        await server.stop()


async def test_recover_since_a_time_delivers_dead_letters_page_by_page(worker: WorkerProcess) -> None:
    broken = {"on": True}
    good: list[Delivery] = []

    async def behaviour(path: str, d: Delivery) -> int:
        if broken["on"] and d.seq:  # probes (pings, no seq) pass, so the circuit closes
            return 400
        good.append(d)
        return 200

    server = await Receiver(behaviour).start()
    try:
        async with DispatcherClient(worker.url, TOKEN) as api:
            rid = (await api.create_receiver(server.url("recover")))["id"]
            since = datetime.fromtimestamp(time.time() - 1, UTC).isoformat()
            ids = [(await api.send_message(rid, "t.recover", {"n": n}))["id"] for n in range(5)]
            await wait_until_dead(api, rid, 5)
            with pytest.raises(ApiError) as info:
                await api.resend(rid, ids[0])
            conflict = (409, "not_delivered", "message_id")
            assert (info.value.status, info.value.code, info.value.field) == conflict
            with pytest.raises(ApiError) as info:
                await api.recover(rid, "last tuesday")
            assert (info.value.status, info.value.field) == (422, "since")
            nothing = await api.recover(rid, time.time() + 60, until=time.time() + 120)
            assert (nothing["recovered"], nothing["next_after_seq"]) == (0, None)

            broken["on"] = False
            done = await asyncio.to_thread(cli, worker, "receivers", "recover", rid, "--since", since,
                                           "--page", "2", "--json")
            assert done.returncode == 0, done.stderr
            assert orjson.loads(done.stdout)["recovered"] == 5 and orjson.loads(done.stdout)["pages"] == 3
            progress = [line for line in done.stderr.splitlines() if line.startswith("recovered")]
            assert progress[0].startswith("recovered 2,") and progress[-1].startswith("recovered 5,")
            await wait_until(lambda: len(recovered(good)) == 5, 30, "the recovered messages")
            replays = [(d.seq, d.headers["webhook-replay-of"]) for d in recovered(good)]
            assert replays == [(6 + n, str(1 + n)) for n in range(5)]
    finally:
        await server.stop()


def recovered(deliveries: list[Delivery]) -> list[Delivery]:
    return [d for d in deliveries if d.headers.get("webhook-event-type") == "t.recover"]


async def wait_until_dead(api: DispatcherClient, rid: str, count: int) -> None:
    for _ in range(600):
        if (await api.receiver_state(rid))["dead_lettered"] == count:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never {count} dead letters")


async def test_a_message_no_longer_kept_is_gone(
    make_module_worker: Callable[..., WorkerProcess], broker: EmbeddedBroker
) -> None:
    """With DISPATCHER_RETAIN_SECONDS=0 a delivered message is not kept: resend answers 410; and a
    dead letter that kept only a summary of its data is skipped by replay, not sent without it."""
    forgetful = make_module_worker(DISPATCHER_RETAIN_SECONDS="0")
    await forgetful.wait_ready()

    async def behaviour(path: str, d: Delivery) -> int:
        return 400 if path.startswith("big") else 200

    server = await Receiver(behaviour).start()
    try:
        async with DispatcherClient(forgetful.url, TOKEN) as api:
            rid = (await api.create_receiver(server.url("gone")))["id"]
            await api.send_message(rid, "t.gone", {"n": 1}, id="gone-1")
            await wait_delivered(api, rid, "gone-1")
            with pytest.raises(ApiError) as info:
                await api.resend(rid, "gone-1")
            assert (info.value.status, info.value.code, info.value.field) == (410, "expired", "message_id")
            assert "DISPATCHER_RETAIN_SECONDS=0" in info.value.message

            big = (await api.create_receiver(server.url("big")))["id"]
            await produce_big(broker, forgetful, big)
            await api.send_message(big, "t.small", {"n": 1}, id="small-1")
            await wait_until_dead(api, big, 2)
            replayed = await api.replay(big)
            assert replayed["skipped_seqs"] == [1], replayed
            assert [m["original_id"] for m in replayed["messages"]] == ["small-1"]
    finally:
        await server.stop()
