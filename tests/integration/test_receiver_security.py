"""Secrets, signatures, header hygiene and endpoint verification, through a real worker.

Receivers verify with the official `standardwebhooks` library (HMAC) or with
the `whpk_` public key (ed25519); a raw socket receiver sees the request bytes
exactly as they reach the wire.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from dispatcher.domain.signing import decode_secret
from dispatcher.domain.signing import verify as verify_hmac
from tests.harness import Api, Delivery, Receiver, ScriptedReceiver, WorkerProcess, answering, wait_until

pytestmark = pytest.mark.integration

SEEN_SECRETS: list[str] = []  # every secret this module handled; none may reach the worker log


def message(rid: str, n: int = 0, **extra: Any) -> dict[str, Any]:
    return {"receiver_id": rid, "event_type": "t.x", "payload": {"n": n}, **extra}


async def send_and_receive(api: Api, recv: Receiver, rid: str, n: int) -> Delivery:
    before = len(recv.deliveries)
    await api.send_batch([message(rid, n)])
    await wait_until(lambda: len(recv.deliveries) > before, 15, f"message {n}")
    return recv.deliveries[before]


def verifies(secret: str, delivery: Delivery) -> bool:
    try:
        Webhook(secret).verify(delivery.body, delivery.headers)
    except WebhookVerificationError:
        return False
    return True


async def test_rotation_signs_with_both_secrets_during_the_grace_period_then_the_new_one(
    api: Api, receiver: Receiver
) -> None:
    created = await api.create_receiver(receiver.url("rotate"))
    rid, old = created["id"], created["secret"]
    assert verifies(old, await send_and_receive(api, receiver, rid, 1))

    status, rotated = await api.call("POST", f"/v1/receivers/{rid}/secrets/rotate", {"grace_seconds": 2})
    assert status == 200, rotated
    new = rotated["secret"]
    assert new.startswith("whsec_") and new != old
    SEEN_SECRETS.extend([old, new])

    during = await send_and_receive(api, receiver, rid, 2)
    assert len(during.headers["webhook-signature"].split()) == 2
    assert verifies(old, during) and verifies(new, during)

    await asyncio.sleep(2.2)  # the grace period ends
    after = await send_and_receive(api, receiver, rid, 3)
    assert verifies(new, after) and not verifies(old, after)

    status, view = await api.call("GET", f"/v1/receivers/{rid}")
    assert status == 200 and "secret" not in view and old not in str(view) and new not in str(view)


async def test_a_replace_keeps_the_secret_and_does_not_show_it(api: Api, receiver: Receiver) -> None:
    created = await api.create_receiver(receiver.url("replace"))
    rid, secret = created["id"], created["secret"]
    SEEN_SECRETS.append(secret)
    status, replaced = await api.call(
        "POST", "/v1/receivers", {"id": rid, "url": receiver.url("replaced"), "event_types": ["t.x"]}
    )
    assert status == 200 and "secret" not in replaced, replaced
    delivery = await send_and_receive(api, receiver, rid, 1)
    assert delivery.path == "replaced" and verifies(secret, delivery)


async def test_ed25519_receivers_verify_with_the_public_key(api: Api, receiver: Receiver) -> None:
    created = await api.create_receiver(receiver.url("ed25519"), signing="ed25519")
    assert "secret" not in created and created["signing"] == "ed25519"
    public = Ed25519PublicKey.from_public_bytes(base64.b64decode(created["public_key"].removeprefix("whpk_")))
    delivery = await send_and_receive(api, receiver, created["id"], 1)
    scheme, signature = delivery.headers["webhook-signature"].split(",", 1)
    assert scheme == "v1a"
    signed = f"{delivery.msg_id}.{delivery.headers['webhook-timestamp']}.".encode() + delivery.body
    public.verify(base64.b64decode(signature), signed)  # raises if it does not verify

    status, rotated = await api.call("POST", f"/v1/receivers/{created['id']}/secrets/rotate")
    assert status == 200 and rotated["public_key"] != created["public_key"]
    during = await send_and_receive(api, receiver, created["id"], 2)
    assert [s.split(",")[0] for s in during.headers["webhook-signature"].split()] == ["v1a", "v1a"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"headers": {"X-A": "1\r\nX-Evil: 2"}}, "headers.X-A"),
        ({"headers": {"X-A": "1\nX-Evil: 2"}}, "headers.X-A"),
        ({"headers": {"X-A": "1\r\n\r\nGET / HTTP/1.1"}}, "headers.X-A"),
        ({"headers": {"X-A\r\nX-Evil": "2"}}, "headers.X-A\r\nX-Evil"),
        ({"headers": {"X-A": "a\x00b"}}, "headers.X-A"),
        ({"headers": {"X-A": "\u0130\u2028"}}, "headers.X-A"),
        ({"headers": {"Host": "metadata.internal"}}, "headers.Host"),
        ({"headers": {"Content-Length": "0"}}, "headers.Content-Length"),
        ({"headers": {"Transfer-Encoding": "chunked"}}, "headers.Transfer-Encoding"),
        ({"headers": {"webhook-signature": "v1,forged"}}, "headers.webhook-signature"),
        ({"headers": {"X-Forwarded-For": "10.0.0.1"}}, "headers.X-Forwarded-For"),
        ({"headers": {"traceparent": "00-abc"}}, "headers.traceparent"),
        ({"headers": {"Authorization": "Bearer x"}}, "headers.Authorization"),
        ({"authorization": "Bearer x\r\nX-Evil: 1"}, "authorization"),
    ],
)
async def test_header_injection_is_refused_at_the_api(
    api: Api, receiver: Receiver, body: dict[str, Any], field: str
) -> None:
    status, answer = await api.call("POST", "/v1/receivers", {"url": receiver.url("h"), **body})
    assert (status, answer["error"]["field"]) == (422, field), answer
    if "headers" in body:
        rid = (await api.create_receiver(receiver.url("h")))["id"]
        status, answer = await api.call("POST", "/v1/messages", message(rid, headers=body["headers"]))
        assert (status, answer["error"]["field"]) == (422, field), answer
        status, answer = await api.call(
            "POST", "/v1/messages/batch", {"messages": [message(rid), message(rid, headers=body["headers"])]}
        )
        assert (status, answer["error"]["field"]) == (422, f"messages[1].{field}"), answer


@pytest.fixture
async def wire() -> AsyncIterator[ScriptedReceiver]:
    """Keeps each request's raw bytes, exactly as they came off the socket."""
    server = await ScriptedReceiver(answering(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")).start()
    yield server
    await server.stop()


EXPECTED_HEADERS = {
    "host", "content-type", "content-length", "user-agent", "accept", "accept-encoding", "webhook-id",
    "webhook-timestamp", "webhook-signature", "webhook-sequence", "webhook-event-type", "x-tenant",
    "x-message", "authorization",
}


async def test_only_our_headers_and_the_receivers_reach_the_wire(api: Api, wire: ScriptedReceiver) -> None:
    created = await api.create_receiver(
        f"http://127.0.0.1:{wire.port}/wire", headers={"X-Tenant": "t-1"}, authorization="Bearer wire-token"
    )
    SEEN_SECRETS.extend([created["secret"], "wire-token"])
    assert created["authorization_set"] and "wire-token" not in str(created)
    await api.send_batch([message(created["id"], headers={"X-Message": "m-1", "x-tenant": "t-2"})])
    await wait_until(lambda: len(wire.requests) == 1, 15, "the request on the wire")
    raw = wire.requests[0]
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"POST /wire HTTP/1.1"
    assert all(b"\r" not in line and b"\n" not in line for line in lines)
    headers = dict(line.decode("ascii").split(": ", 1) for line in lines[1:])
    assert {name.lower() for name in headers} == EXPECTED_HEADERS
    lowered = {name.lower(): value for name, value in headers.items()}
    assert lowered["x-tenant"] == "t-2", "a message's header replaces the receiver's of the same name"
    assert lowered["authorization"] == "Bearer wire-token"
    assert lowered["user-agent"] == "webhook-dispatcher"
    assert int(lowered["content-length"]) == len(body)


async def test_verification_holds_a_receiver_that_does_not_echo_until_it_does(api: Api) -> None:
    recv = await Receiver(echo_challenge=False).start()
    try:
        created = await api.create_receiver(recv.url("verify"), verify=True)
        SEEN_SECRETS.append(created["secret"])
        rid = created["id"]
        assert len(recv.challenges) == 1 and recv.challenges[0].headers["webhook-challenge"]
        assert created["verification"]["status"] == "failed" and not created["verified"]
        assert "without the challenge" in created["verification"]["reason"]
        challenge = recv.challenges[0].headers
        assert verify_hmac(
            decode_secret(created["secret"]), challenge["webhook-id"], int(challenge["webhook-timestamp"]),
            challenge["webhook-challenge"].encode(), challenge["webhook-signature"],
        ), "the challenge is signed like a webhook, with the challenge as the signed body"
        state = await api.state(rid)
        assert state["status"] == "unverified"

        await api.send_batch([message(rid, n) for n in range(3)])
        await asyncio.sleep(0.5)  # would be three deliveries if the receiver were active
        assert recv.deliveries == []
        assert (await api.state(rid))["backlog"] == 3

        recv.echo_challenge = True  # the developer fixes their endpoint
        status, answer = await api.call("POST", f"/v1/receivers/{rid}/verify")
        assert status == 200 and answer["verified"] and answer["verification"]["status"] == "passed"
        await wait_until(lambda: len(recv.deliveries) == 3, 15, "the held messages")
        assert [d.seq for d in recv.deliveries] == [1, 2, 3]
    finally:
        await recv.stop()


async def test_verification_passes_for_an_echoing_receiver(api: Api) -> None:
    recv = await Receiver(echo_challenge=True).start()
    try:
        created = await api.create_receiver(recv.url("echo"), verify=True)
        SEEN_SECRETS.append(created["secret"])
        assert created["verified"] and created["verification"]["status"] == "passed"
        await send_and_receive(api, recv, created["id"], 1)
        status, moved = await api.call(
            "POST", "/v1/receivers", {"id": created["id"], "url": recv.url("moved"), "verify": True}
        )
        assert status == 200 and moved["verified"], "a new URL is verified again"
        assert [c.path for c in recv.challenges] == ["echo", "moved"]
    finally:
        await recv.stop()


async def test_verify_on_a_receiver_without_verification_says_it_is_off(api: Api) -> None:
    recv = await Receiver(echo_challenge=False).start()
    try:
        created = await api.create_receiver(recv.url("plain"), verify=False)
        SEEN_SECRETS.append(created["secret"])
        rid = created["id"]
        status, answer = await api.call("POST", f"/v1/receivers/{rid}/verify")
        error = answer["error"]
        assert (status, error["code"], error["field"]) == (409, "verification_off", "verify")
        assert recv.challenges == [], "no handshake is run for it"
        status, shown = await api.call("GET", f"/v1/receivers/{rid}")
        assert (status, shown["verify"], shown["verified"], shown["verification"]) == (200, False, True, None)
        assert shown["state"]["status"] == "active"
    finally:
        await recv.stop()


async def test_no_secret_reaches_the_worker_log(worker: WorkerProcess) -> None:
    """Runs last in this module: every secret the tests above handled is checked against the log."""
    assert SEEN_SECRETS, "the tests above record the secrets they saw"
    log = worker.log_path.read_text(errors="replace")
    for secret in SEEN_SECRETS:
        assert secret not in log
        assert secret.removeprefix("whsec_") not in log
