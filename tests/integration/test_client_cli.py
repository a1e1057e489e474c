"""The Python client, the Kafka producer helper and the CLI, against a worker on the embedded broker."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaProducer

from dispatcher.broker import EmbeddedBroker
from dispatcher.client import ApiError, DispatcherClient, DispatcherProducer
from dispatcher.domain.events import copy_id
from tests.harness import TOKEN, Delivery, Receiver, WorkerProcess, first_copies, wait_until


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
            assert server.completed[1].msg_id == copy_id("ev-1", "client-r")
            listed = await api.list_receivers(tenant="acme", event_type="client.any")
            assert [r["id"] for r in listed["receivers"]] == ["client-r"] and listed["next_cursor"] is None
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


def cli(worker: WorkerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DISPATCHER_URL": worker.url, "DISPATCHER_API_TOKEN": TOKEN}
    return subprocess.run(
        [sys.executable, "-m", "dispatcher", *args], env=env, capture_output=True, text=True, timeout=60
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

        listing = ["receivers", "list", "--event-type", "cli.z", "--page", "1"]  # page by page
        run = await asyncio.to_thread(cli, worker, *listing)
        assert run.returncode == 0, run.stderr
        table = run.stdout.splitlines()
        assert table[0].split()[:3] == ["ID", "STATUS", "BACKLOG"]
        assert [row.split()[0] for row in table[1:]] == ["cli-r"], "only receivers that would get cli.z"

        run = await asyncio.to_thread(cli, worker, "send", "cli-r", "cli.x", "{not json")
        assert run.returncode == 2 and "payload is not JSON" in run.stderr
        run = await asyncio.to_thread(cli, worker, "receivers", "show", "nobody")
        assert run.returncode == 1 and "404 not_found: receiver_id" in run.stderr
    finally:
        await server.stop()
