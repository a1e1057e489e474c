"""Hostile API callers against real workers: broken auth headers, probes fishing for internals,
wildcard binds, oversized batches. Everything dials 127.0.0.1 only."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from dispatcher.broker import free_port
from tests.harness import TOKEN, Api, Receiver, WorkerProcess, wait_assigned, wait_until, wait_until_read

pytestmark = [pytest.mark.adversarial, pytest.mark.integration]

Target = tuple[str, Receiver]  # a receiver's id and the loopback server behind it
INTERNALS = ("partitions", "in_flight", "delivery", "subscriptions", "timers", "collector")


async def raw_get(port: int, path: str, headers: bytes = b"") -> tuple[int, bytes]:
    """GET with header bytes no HTTP client would send (clients refuse non-latin-1): (status, body)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"GET " + path.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                     + headers + b"\r\n")
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), 15)  # the worker closes: Connection: close
    finally:
        writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


def no_internals(body: bytes) -> None:
    lowered = body.lower()
    for leak in (b"traceback", b"unicode", b"encode", b'file "', b"line ", b".py"):
        assert leak not in lowered, body


# Authorization headers that are not UTF-8 ----------------------------------------------------

BAD_AUTHORIZATIONS = [
    b"Bearer \xff\xfe",  # not UTF-8 at all
    b"Bearer " + TOKEN.encode() + b"\xc3",  # the right token with a truncated UTF-8 sequence after it
    b"Bearer t\xe9st-token",  # latin-1, as a client that encodes headers as latin-1 sends it
    b"\xed\xa0\x80",  # an encoded UTF-16 surrogate: invalid UTF-8
]


@pytest.mark.parametrize("authorization", BAD_AUTHORIZATIONS)
@pytest.mark.parametrize("accept", [b"application/json", b"text/html"])
async def test_a_non_utf8_authorization_header_is_a_plain_401(
    worker: WorkerProcess, authorization: bytes, accept: bytes
) -> None:
    port = int(worker.url.rsplit(":", 1)[1])
    status, body = await raw_get(port, "/v1/receivers", b"Authorization: " + authorization
                                 + b"\r\nAccept: " + accept + b"\r\n")
    assert status == 401, body
    error = orjson.loads(body)["error"]
    assert (error["code"], error["field"]) == ("unauthorized", "Authorization")
    no_internals(body)


async def test_the_right_token_over_the_raw_socket_still_passes(worker: WorkerProcess) -> None:
    port = int(worker.url.rsplit(":", 1)[1])
    status, body = await raw_get(port, "/v1/receivers", b"Authorization: Bearer " + TOKEN.encode() + b"\r\n")
    assert status == 200, body


@pytest.mark.parametrize("authorization", BAD_AUTHORIZATIONS)
async def test_readyz_with_a_non_utf8_authorization_answers_the_probe(
    worker: WorkerProcess, authorization: bytes
) -> None:
    port = int(worker.url.rsplit(":", 1)[1])
    status, body = await raw_get(port, "/readyz", b"Authorization: " + authorization + b"\r\n")
    assert (status, orjson.loads(body)) == (200, {"status": "ready"})


# /readyz: a probe gets the status, only a token holder gets the figures ------------------------


async def test_readyz_shows_internals_only_with_the_token(worker: WorkerProcess) -> None:
    port = int(worker.url.rsplit(":", 1)[1])
    status, body = await raw_get(port, "/readyz")  # a Kubernetes probe: no header at all
    assert (status, orjson.loads(body)) == (200, {"status": "ready"})
    for token in ("", "wrong", TOKEN + "x"):
        client = Api(worker.url, token)
        try:
            assert await client.call("GET", "/readyz") == (200, {"status": "ready"}), token
        finally:
            await client.close()
    client = Api(worker.url)
    try:
        status, full = await client.call("GET", "/readyz")
    finally:
        await client.close()
    assert status == 200 and full["status"] == "ready"
    assert set(INTERNALS) <= set(full), full
    assert full["partitions"], "the only worker owns partitions"


# A wildcard bind advertises a URL the other workers can reach ----------------------------------


def wildcard_worker(make_worker: Callable[..., WorkerProcess], name: str) -> WorkerProcess:
    """A worker bound to 0.0.0.0 that advertises its loopback URL (tests dial 127.0.0.1 only)."""
    worker = make_worker(name)
    worker.port = free_port()
    worker.extra_env.update({
        "DISPATCHER_WEB_HOST": "0.0.0.0",
        "DISPATCHER_ADVERTISED_URL": f"http://127.0.0.1:{worker.port}",
    })
    return worker.start()


async def test_workers_bound_to_0_0_0_0_route_to_their_advertised_urls(
    make_worker: Callable[..., WorkerProcess],
) -> None:
    workers = [wildcard_worker(make_worker, "a"), wildcard_worker(make_worker, "b")]
    for w in workers:
        await w.wait_ready()
    split = await wait_assigned(workers, "the two workers sharing the partitions")
    parts = [set(split[w.data_dir.name]) for w in workers]
    server = await Receiver().start()
    apis = [Api(w.url) for w in workers]
    try:
        rids = [(await apis[i % 2].create_receiver(server.url(f"w{i}"), id=f"w{i}"))["id"] for i in range(12)]
        await apis[1].send_batch([
            {"receiver_id": rid, "event_type": "t.x", "payload": {}, "id": f"m-{rid}"} for rid in rids
        ])
        await wait_until(lambda: len(server.completed) == len(rids), 60, "one delivery each")
        owners = set()
        for rid in rids:
            async def both(rid: str = rid) -> list[tuple[int, Any]]:
                return [await api.call("GET", f"/v1/receivers/{rid}/state") for api in apis]

            # The receiver has answered; its outcome reaches the owner's actor a moment later.
            answers = await wait_until_read(
                both, lambda found: all(s == 200 and body["delivered_seq"] == 1 for s, body in found), 30,
                f"{rid} delivered, as both workers tell")
            assert answers[0][1] == answers[1][1], rid
            state = answers[0][1]
            owner = next(i for i, p in enumerate(parts) if state["partition"] in p)
            owners.add(owner)
            assert state["owner"] == workers[owner].url, "the advertised URL, not 0.0.0.0"
            assert state["delivered_seq"] == 1
        assert owners == {0, 1}, "receivers on both workers' partitions"
    finally:
        for api in apis:
            await api.close()
        await server.stop()


# Batches are bounded in count and in bytes, and say which field is at fault ---------------------


@pytest.fixture
async def batch_receiver(api: Api) -> AsyncIterator[Target]:
    """A fresh receiver per test, so one test's deliveries never count in another's."""
    server = await Receiver().start()
    created = await api.create_receiver(server.url("batch"), id=f"batch-{uuid.uuid4().hex[:8]}")
    yield created["id"], server
    await server.stop()


def message(rid: str, payload: Any, n: int = 0) -> dict[str, Any]:
    return {"receiver_id": rid, "event_type": "t.x", "payload": payload, "id": f"b{n}"}


async def test_a_batch_of_more_than_1000_messages_is_refused(api: Api, batch_receiver: Target) -> None:
    rid, _ = batch_receiver
    status, answer = await api.call("POST", "/v1/messages/batch",
                                    {"messages": [message(rid, n, n) for n in range(1001)]})
    assert (status, answer["error"]["field"]) == (422, "messages"), answer
    assert "1000" in answer["error"]["message"]


async def test_a_batch_over_its_byte_cap_is_refused_before_any_message_is_sent(
    api: Api, batch_receiver: Target
) -> None:
    rid, server = batch_receiver
    # Every message is under DISPATCHER_MAX_PAYLOAD (256 KiB) and the body under the 32 MiB
    # DISPATCHER_MAX_REQUEST_BODY, yet together they are more than a batch may carry.
    batch = [message(rid, "x" * 200_000, n) for n in range(60)]
    status, answer = await api.call("POST", "/v1/messages/batch", {"messages": batch})
    assert (status, answer["error"]["code"], answer["error"]["field"]) == (413, "too_large", "messages")
    await asyncio.sleep(0.5)
    assert not server.deliveries, "none of the batch was sent"


async def test_a_batch_message_over_the_payload_cap_is_named(api: Api, batch_receiver: Target) -> None:
    rid, server = batch_receiver
    batch = [message(rid, "ok", 0), message(rid, "ok", 1), message(rid, "x" * 300_000, 2)]
    status, answer = await api.call("POST", "/v1/messages/batch", {"messages": batch})
    assert (status, answer["error"]["field"]) == (413, "messages[2].payload"), answer
    await asyncio.sleep(0.5)
    assert not server.deliveries, "none of the batch was sent"


def peak_rss_mb(worker: WorkerProcess) -> float:
    """The worker's peak resident memory so far (VmHWM), from /proc."""
    assert worker.process is not None
    for line in Path(f"/proc/{worker.process.pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


async def test_a_batch_of_tiny_json_objects_does_not_balloon_the_worker(
    api: Api, worker: WorkerProcess, batch_receiver: Target
) -> None:
    """30 MiB of `{}` parses into ~900 MB of Python dicts: the batch's size is checked first."""
    rid, server = batch_receiver
    raw = (b'{"messages": [{"receiver_id": "' + rid.encode() + b'", "event_type": "t.x", "payload": ['
           + b"{}," * (10 * 1024 * 1024) + b"{}]}]}")
    before = peak_rss_mb(worker)
    async with api._session.post(worker.url + "/v1/messages/batch", data=raw) as resp:
        status, answer = resp.status, await resp.json()
    assert (status, answer["error"]["field"]) == (413, "messages"), answer
    grew = peak_rss_mb(worker) - before
    assert grew < 300, f"peak RSS grew by {grew:.0f} MB for one refused request"
    assert not server.deliveries
