"""Hostile receivers against both HTTP clients: each answer is tried on its schedule, never in a hot loop.

A raw server on 127.0.0.1 answers each path with one hostile response, byte
for byte, then hangs up (with a reset where the attack says so). Every
receiver has a short schedule of 3 attempts; whatever it answers, the worker
must POST it exactly 3 times and then dead-letter the message as
`max_attempts`. Before the hardening, a `Retry-After: ²` or a header that is
not UTF-8 made the outcome raise and the message was POSTed again at once,
and a 200 cut off by a reset counted as delivered.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from tests.harness import Api, ScriptedReceiver, WorkerProcess, wait_until_read

pytestmark = [pytest.mark.integration, pytest.mark.adversarial]

ATTEMPTS = 3
RETRY = {"schedule": [0.3], "jitter": 0, "max_attempts": ATTEMPTS}
RESET = b"<reset>"  # the answer ends with a TCP reset instead of a clean close


def _503(extra: bytes) -> bytes:
    return b"HTTP/1.1 503 Busy\r\n" + extra + b"content-length: 0\r\nconnection: close\r\n\r\n"


ATTACKS: dict[str, bytes] = {
    "retry-after-superscript": _503("retry-after: ²\r\n".encode()),
    "retry-after-arabic-digit": _503("retry-after: ٣\r\n".encode()),
    "retry-after-not-utf8": _503(b"retry-after: \xff\xfe1\r\n"),
    "retry-after-negative": _503(b"retry-after: -5\r\n"),
    "retry-after-exponent": _503(b"retry-after: 1e9\r\n"),
    "retry-after-year-1": _503(b"retry-after: Mon, 01 Jan 0001 00:00:00 GMT\r\n"),
    "retry-after-past-date": _503(b"retry-after: Wed, 21 Oct 2015 07:28:00 GMT\r\n"),
    "retry-after-naive-date": _503(b"retry-after: 2099-01-01T00:00:00\r\n"),
    "headers-not-utf8": _503(b"x-request-id: \xff\xfe\xfd\r\ncontent-type: \xc3\x28\r\nserver: \x80\r\n"),
    "header-oversized": _503(b"x-big: " + b"a" * 9000 + b"\r\n"),
    "headers-flood": _503(b"".join(b"x-h%d: v\r\n" % i for i in range(200))),
    "ok-cut-by-reset": b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\npartial" + RESET,
    "ok-close-delimited-reset": b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\npartial" + RESET,
    "ok-truncated-body": b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nshort",
    "reset-before-answer": RESET,
    "status-line-garbage": b"HTTP/1.1 2OO OK\r\ncontent-length: 0\r\n\r\n",
    "body-not-utf8": b"HTTP/1.1 500 Oops\r\ncontent-length: 4\r\nconnection: close\r\n\r\n\xff\xfe\xfd\xfc",
}


async def answer_with_attack(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: ScriptedReceiver
) -> None:
    """Answer one request with the attack its path names, then hang up (with a reset if it says so)."""
    head = await server.read_request(reader)
    path = head.split(b" ", 2)[1].decode().lstrip("/")
    answer = ATTACKS.get(path.split("/")[0], b"HTTP/1.1 204 No Content\r\n\r\n")
    writer.write(answer.removesuffix(RESET))
    await writer.drain()
    if answer.endswith(RESET):
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()


def posts_by_path(server: ScriptedReceiver) -> Counter[str]:
    return Counter(raw.split(b" ", 2)[1].decode().lstrip("/") for raw in server.requests
                   if raw.startswith(b"POST"))


@pytest.fixture(scope="module")
async def hostile() -> AsyncIterator[ScriptedReceiver]:
    server = await ScriptedReceiver(answer_with_attack).start()
    yield server
    await server.stop()


@pytest.fixture(scope="module", params=["http1", "aiohttp"])
async def client_worker(
    request: pytest.FixtureRequest, make_module_worker: Callable[..., WorkerProcess]
) -> AsyncIterator[WorkerProcess]:
    proc = make_module_worker(DISPATCHER_HTTP_CLIENT=request.param, DISPATCHER_TIMEOUT="3")
    await proc.wait_ready()
    yield proc


async def _message_status(api: Api, rid: str, msg_id: str) -> dict[str, Any]:
    status, body = await api.call("GET", f"/v1/receivers/{rid}/messages/{msg_id}")
    assert status == 200, body
    return body


async def test_every_hostile_answer_gets_exactly_the_scheduled_posts(
    client_worker: WorkerProcess, hostile: ScriptedReceiver
) -> None:
    api = Api(client_worker.url)
    try:
        sent: dict[str, tuple[str, str]] = {}
        for attack in ATTACKS:
            path = f"{attack}/{client_worker.app_id}"
            rid = (await api.create_receiver(hostile.url(path), retry=RETRY))["id"]
            [msg_id] = await api.send_batch([{"receiver_id": rid, "event_type": "t.x", "payload": {}}])
            sent[attack] = (rid, msg_id)
        outcomes = {}
        for attack, (rid, msg_id) in sent.items():
            body = await wait_until_read(
                lambda rid=rid, msg_id=msg_id: _message_status(api, rid, msg_id),
                lambda b: b["status"] != "pending", 60, f"{attack} settled",
            )
            outcomes[attack] = (body["status"], body.get("reason"))
        for attack, (rid, _) in sent.items():
            state = await api.state(rid)
            assert state["backlog"] == 0, (attack, state)
        counted = posts_by_path(hostile)
        posts = {name: counted[f"{name}/{client_worker.app_id}"] for name in ATTACKS}
        assert outcomes == dict.fromkeys(ATTACKS, ("dead_lettered", "max_attempts")), outcomes
        assert posts == dict.fromkeys(ATTACKS, ATTEMPTS), posts
    finally:
        await api.close()
